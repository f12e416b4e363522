"""Calls a framework makes with its own built-in prompt are named after what makes them
(``faultfinder.replay.framework_prompts``), not after an agent the prompt quotes, and not
anew on every call as the prompt's quoted history grows."""

from __future__ import annotations

from typing import Any

import pytest

from faultfinder.replay.framework_prompts import SPEAKER_SELECTOR, built_in_agent
from faultfinder.replay.matching import Matcher

ROLES = (
    "Planner: You are the Planner. Say what must be looked up.\n"
    "Researcher: You are the Researcher. Use the lookup tool for every fact.\n"
    "Writer: You are the Writer. State the final answer."
)


DESCRIBED = (
    "Planner: Plans what must be looked up.\n"
    "Researcher: Looks facts up with the lookup tool.\n"
    "Writer: States the final answer."
)
"""Roles as SelectorGroupChat lists them: each agent's description, no name in a prompt."""


def selection(
    history: str, candidates: str, role: str = "system", roles: str = ROLES
) -> dict[str, Any]:
    """A speaker-selection request as a group chat writes it: the roles, the candidates
    and the conversation so far, all in one prompt."""
    prompt = (
        f"You are in a role play game. The following roles are available:\n{roles}.\n"
        f"Read the following conversation. Then select the next role from {candidates} "
        f"to play. Only return the role.\n\n{history}\n\nRead the above conversation. "
        f"Then select the next role from {candidates} to play. Only return the role.\n"
    )
    return {"model": "m", "messages": [{"role": role, "content": prompt}]}


def test_speaker_selection_is_not_taken_for_the_first_role_it_lists() -> None:
    agent, source = Matcher().agent(None, None, selection("user: task", "[Planner, Writer]"))
    assert (agent, source) == (SPEAKER_SELECTOR, "system-prompt")


@pytest.mark.parametrize("roles", [ROLES, DESCRIBED], ids=["prompts", "descriptions"])
def test_every_speaker_selection_of_a_run_is_one_agent_however_its_history_grows(
    roles: str,
) -> None:
    matcher = Matcher()
    turns = [
        ("user: task", "['Planner', 'Researcher', 'Writer']"),
        ("user: task\n\nPlanner: Look up: X", "['Researcher', 'Writer']"),
        ("user: task\n\nPlanner: Look up: X\n\nResearcher: 12", "['Planner', 'Writer']"),
    ]
    names = {matcher.agent(None, None, selection(h, c, roles=roles))[0] for h, c in turns}
    assert names == {SPEAKER_SELECTOR}


def test_a_selection_prompt_sent_as_the_first_user_message_is_named_too() -> None:
    body = selection("user: task", "['Planner', 'Writer']", role="user")
    assert Matcher().agent(None, None, body) == (SPEAKER_SELECTOR, "system-prompt")
    # Any other request without a system prompt is still the default agent.
    plain = {"model": "m", "messages": [{"role": "user", "content": "You are in a hurry."}]}
    assert Matcher().agent(None, None, plain) == ("assistant", "default")


def test_a_header_still_names_the_caller_and_user_prompts_keep_their_names() -> None:
    assert Matcher().agent("Manager", None, selection("", "[]")) == ("Manager", "header")
    # A user's agent whose prompt mentions a role play game is not a selector.
    own = {"messages": [{"role": "system", "content": "You are the Bard. You are in a play."}]}
    assert Matcher().agent(None, None, own)[0] == "Bard"
    assert built_in_agent("We are in a role play game. The following roles are available:") is None
