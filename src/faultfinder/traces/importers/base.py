"""What a trace importer is (:class:`Importer`), and the check the registry makes of
every importer class it loads (:func:`importer_problem`).

This module imports nothing that imports ``faultfinder.registry``, so the registry can
ask it about a class without a cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from faultfinder.contracts import interface_problem
from faultfinder.traces.schema import Trace


@runtime_checkable
class Importer(Protocol):
    """Reads one source format."""

    name: ClassVar[str]
    """Format name for ``--format``."""
    summary: ClassVar[str]
    """One line for help texts."""

    def detect(self, path: Path) -> bool:
        """True when ``path`` (file or directory) is in this format."""
        ...

    def load(self, path: Path, **options: Any) -> list[Trace]:
        """All traces at ``path``. Malformed input raises TraceFormatError (file, field, reason)."""
        ...


def no_steps_reason(trace: Trace) -> str:
    """Why a trace read faithfully has no step, for the warning `import` and `collect`
    print: nothing in it is a model call, an agent's turn or a tool result (a non-agent
    OTLP export, say), so there is nothing to attribute in it."""
    spans = trace.metadata.get("spans")
    agents = ", ".join(a.name for a in trace.agents)
    if isinstance(spans, int) and agents:
        found = (
            f"its {spans} span(s) name the agent(s) {agents} but hold no model call, agent "
            "turn or tool call (AutoGen's `create_agent` span of an agent built outside the "
            "run's span is such a trace: the run is another trace)"
        )
    elif isinstance(spans, int):
        found = (
            f"none of its {spans} span(s) is a model call, an agent or a tool as the OTel "
            "GenAI or OpenInference conventions mark them"
        )
    else:
        found = "it holds no message, model call or tool result that faultfinder reads"
    return f"{found}; there is nothing to attribute in it (docs/import.md says what becomes a step)"


IMPORTER_TEXTS = ("name", "summary")
"""The strings an importer class declares: its format name and its help line."""
IMPORTER_CALLS = ("detect", "load")
"""What the commands call on an importer: every file whose format is not named is asked
``detect``, and the importer that says yes is asked ``load``."""


def importer_problem(cls: object) -> str | None:
    """What keeps ``cls`` from being an importer class (:class:`Importer`), as a phrase
    ('is not a trace importer: it lacks load'), or None. The registry asks it of every
    importer it loads, so one that is not an importer is refused there, in one line
    naming it, before a detection or a help text half-uses it."""
    return interface_problem(
        cls,
        "trace importer",
        "an importer class follows faultfinder.traces.importers.Importer: name, summary, "
        "detect(path), load(path, **options)",
        texts=IMPORTER_TEXTS,
        calls=IMPORTER_CALLS,
        bare=True,
    )
