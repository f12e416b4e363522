"""What a running replay has done so far, read from the files it writes: each call of
``steps.jsonl`` with its origin (replayed from the recording, edited, live) and the tokens
the upstream spent (read from each reply's ``usage`` as a recorded trace reads it, for
every API; a live reply that reports none is counted as not reported, never as 0), and
the end of the program's ``stdout.txt`` / ``stderr.txt``.

A :class:`BranchWatch` reads ``steps.jsonl`` incrementally (only the bytes appended since
the last poll, whole lines only), so polling a long replay stays linear in its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultfinder.dover.edit_repeats import LIVE_ORIGINS
from faultfinder.llm import json_text
from faultfinder.replay.apis import adapter_named
from faultfinder.replay.canonical import reply_usage
from faultfinder.replay.recorder import STEPS_FILE
from faultfinder.shown import safe
from faultfinder.ui.names import shown_name

OUTPUT_TAIL = 12_000
"""Characters of the program's stdout and stderr sent to the page (the end)."""
COUNTED = {"cached": "replayed", "edited": "edited", "live": "live", "edited-input": "live"}
"""How each origin is counted on the page."""


@dataclass
class BranchWatch:
    """The calls of one branch directory, read as they are appended."""

    branch_dir: Path
    calls: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    """Tokens of the calls the upstream answered, as their replies report them."""
    unreported: int = 0
    """Calls the upstream answered whose replies report no usage (their tokens are not
    in :attr:`tokens`: unknown, not 0)."""
    _offset: int = 0

    def poll(self) -> None:
        path = self.branch_dir / STEPS_FILE
        try:
            with path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return
        complete = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self._offset += complete
        for line in data[:complete].splitlines():
            self._add(line)

    def _add(self, line: bytes) -> None:
        # A line that does not read (invalid, or an integer or nesting past what JSON
        # readers take) is no call to show, and is no reason to fail the page's poll.
        try:
            data = json_text.loads(line)
        except json_text.JSONTextError:
            return
        if not isinstance(data, dict):
            return
        origin = str(data.get("origin", ""))
        used = _tokens(data) if origin in LIVE_ORIGINS else 0
        if used is None:
            self.unreported += 1
        else:
            self.tokens += used
        self.calls.append(
            {
                "call": data.get("call"),
                "agent": shown_name(data.get("agent", "")),  # named on every call
                "origin": origin,
                "replay_of": data.get("replay_of"),
                "status": data.get("status"),
                "tokens": used,
            }
        )

    def counts(self) -> dict[str, int]:
        counts = {"replayed": 0, "edited": 0, "live": 0}
        for call in self.calls:
            shown = COUNTED.get(call["origin"])
            if shown is not None:
                counts[shown] += 1
        return counts


def _tokens(data: dict[str, Any]) -> int | None:
    """The prompt + completion tokens a live call's reply reports, read by the adapter of
    the API it spoke (as the branch's trace reads them); 0 for a call with no reply (it
    failed), None when the reply reports no usage or cannot be read as its API's reply."""
    response = data.get("response")
    if not isinstance(response, dict):
        return 0
    try:
        reply = adapter_named(str(data.get("api", "chat"))).canonical_reply(response)
    except (KeyError, AttributeError, TypeError, ValueError):
        # An API no adapter is loaded for, or a reply not shaped as its API's: the page
        # says its tokens were not reported rather than failing its poll.
        return None
    usage = reply_usage(reply)
    return None if usage is None else usage.total_tokens


def tail(path: Path) -> str:
    """The last OUTPUT_TAIL bytes of a file, as text ('' when it does not exist yet)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - OUTPUT_TAIL))
            # Shown by the page's script: its direction and control characters escaped here.
            return safe(handle.read().decode("utf-8", errors="replace"))
    except OSError:
        return ""
