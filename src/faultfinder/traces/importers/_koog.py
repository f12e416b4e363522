"""Koog's agents named by their strategy, not by a random id.

Koog (JetBrains' Kotlin agent framework) writes no agent name on its spans: its agent
and run spans carry ``gen_ai.agent.id``, a random UUID unless the program chose one, and
its run span the name of the agent's strategy, ``koog.agent.strategy.name``
(``gen_ai.agent.strategy`` in Koog before 0.3), which Koog's documentation calls what
"describes the purpose of the agent". An agent whose id is such a generated UUID is named
by its strategy; two agents of one trace with the same strategy keep apart by the start of
their ids. An id the program chose is a name already and stays one.
"""

from __future__ import annotations

import re
from collections import Counter

from faultfinder.traces.importers._spans import Span

AGENT_ID = "gen_ai.agent.id"
STRATEGY_KEYS = ("koog.agent.strategy.name", "gen_ai.agent.strategy")
NAMED_BY = (
    "Koog's agent strategy (koog.agent.strategy.name): its agent id (gen_ai.agent.id) is a "
    "generated UUID"
)
"""What ``metadata['agent_ids_named_by']`` says of the names."""
_GENERATED = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def name_koog_agents(spans: list[Span]) -> dict[str, str]:
    """The names of the Koog agents among ``spans`` whose id is a generated UUID, by id;
    each span carrying such an id gets the name as its ``agent_for_id`` hint (read by
    ``_span_fields.named_agent`` in place of the id). Empty when there is none."""
    strategies: dict[str, str] = {}
    for span in spans:
        agent_id = _text(span.attributes.get(AGENT_ID))
        strategy = next(
            (s for s in (_text(span.attributes.get(k)) for k in STRATEGY_KEYS) if s), None
        )
        if agent_id and strategy and _GENERATED.fullmatch(agent_id):
            strategies.setdefault(agent_id, strategy)
    shared = Counter(strategies.values())
    names = {
        agent_id: strategy if shared[strategy] == 1 else f"{strategy} ({agent_id[:8]})"
        for agent_id, strategy in strategies.items()
    }
    for span in spans:
        agent_id = _text(span.attributes.get(AGENT_ID))
        if agent_id in names:
            span.hints["agent_for_id"] = names[agent_id]
    return names
