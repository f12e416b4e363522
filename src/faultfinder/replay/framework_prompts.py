"""Agents known by a framework's own built-in prompt rather than by a user's.

Some calls are made by a framework, not by any agent the user wrote: a group chat's
speaker selection is the clearest. Its prompt lists every role (often quoting each
agent's own "You are the X" description) and, in AutoGen AgentChat's SelectorGroupChat,
the whole conversation so far. Named by the general rules (``matching.py``) such a call
is taken for the first agent the list names (AG2's GroupChat: its selections became the
Planner's steps) or, when the prompt names nobody, for a new ``agent-<hash>`` on every
call (SelectorGroupChat: one per turn, as the quoted history grows). Here each built-in
prompt a framework is known to send is recognised by its opening and named after what
makes the call, the same name however the roles and history inside it change.
"""

from __future__ import annotations

import re

SPEAKER_SELECTOR = "speaker-selector"
"""The agent of a group chat's speaker-selection call."""

_BUILT_IN: tuple[tuple[re.Pattern[str], str], ...] = (
    # AG2's GroupChat (select_speaker_msg and its templates) and AutoGen AgentChat's
    # SelectorGroupChat (the default selector_prompt) open with the same sentence.
    (
        re.compile(r"\s*You are in a role play game\. The following roles are available:"),
        SPEAKER_SELECTOR,
    ),
)


def built_in_agent(prompt: str | None) -> str | None:
    """The agent whose framework-written prompt opens ``prompt``, if any."""
    if not prompt:
        return None
    for pattern, agent in _BUILT_IN:
        if pattern.match(prompt):
            return agent
    return None
