"""transcript: a plain-text chat log as a faultfinder trace.

    TASK: What is 2 + 3?
    Planner: Solver, add the numbers.
    Solver: 2 + 3 = 6.
        (checked twice)

The first line holds the task; every other line is 'Agent: message', and an indented line
continues the message above it. Files end in '.transcript'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import TraceFormatError
from faultfinder.traces.io import read_text, split_lines
from faultfinder.traces.schema import SourceInfo, Step, Trace


class TranscriptImporter:
    """Reads '.transcript' files: 'TASK: ...', then 'Agent: message' lines."""

    name: ClassVar[str] = "transcript"
    summary: ClassVar[str] = "plain-text chat log: 'TASK: ...', then 'Agent: message' lines"

    def detect(self, path: Path) -> bool:
        """Only looks: a '.transcript' file whose first line starts with 'TASK:'."""
        if not path.is_file() or path.suffix != ".transcript":
            return False
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            return handle.readline().startswith("TASK:")

    def load(self, path: Path, **options: Any) -> list[Trace]:
        """The one trace in the file; a line that is not 'Agent: message' is an error
        naming the file, the line and what was expected."""
        # faultfinder's reader: a directory, a missing file or bytes that are not UTF-8
        # are a TraceFormatError naming the file (and line), never a traceback.
        lines = split_lines(read_text(path))
        if not lines[0].startswith("TASK:"):
            raise TraceFormatError(f"{path}:1", "task", "expected 'TASK: ...' on line 1")
        turns: list[tuple[str, list[str]]] = []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            if line[0] in " \t" and turns:
                turns[-1][1].append(line.strip())
                continue
            agent, colon, message = line.partition(":")
            if not colon or not agent.strip():
                raise TraceFormatError(f"{path}:{number}", "agent", "expected 'Agent: message'")
            turns.append((agent.strip(), [message.strip()]))
        steps = [
            Step(index=i, agent=agent, content="\n".join(parts))
            for i, (agent, parts) in enumerate(turns)
        ]
        task = lines[0].removeprefix("TASK:").strip()
        source = SourceInfo(format=self.name, path=str(path))
        return [Trace(id=path.stem, task=task, steps=steps, source=source)]
