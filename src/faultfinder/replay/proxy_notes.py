"""What a recording leaves out, in words: failed model calls, requests that are not model
calls, and why a run has no step (printed by ``faultfinder record``)."""

from __future__ import annotations

from pathlib import Path

from faultfinder.errors import TraceFormatError
from faultfinder.replay.recorder import RunMeta, load_calls

BENIGN = ("GET",)
"""Methods of requests that are not model calls and need no warning (models list...)."""


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{what} x{n}" if n > 1 else what for what, n in counts.items())


def _first_error(run_dir: Path) -> str | None:
    try:
        calls = load_calls(run_dir, include_failed=True)
    except TraceFormatError:
        return None
    return next((c.error for c in calls if not c.ok and c.error), None)


def recording_notes(meta: RunMeta, run_dir: Path, steps: int) -> list[str]:
    """Lines for stderr: warnings about model calls left out of the recording, and, for
    a run with no step, why."""
    lines: list[str] = []
    first_error = _first_error(run_dir) if meta.failed_calls else None
    if meta.failed_calls:
        lines.append(
            f"warning: {meta.failed_calls} model call(s) failed and are not steps (kept in "
            f"steps.jsonl with their error; first: {first_error or 'unknown'})"
        )
    posts = {k: n for k, n in meta.unrecorded.items() if not k.startswith(BENIGN)}
    if posts:
        lines.append(
            "warning: forwarded without recording (not a model API faultfinder records: "
            f"chat completions, responses, messages): {_listed(posts)}"
        )
    if steps:
        return lines
    if meta.failed_calls:
        why = f"every model call failed ({meta.failed_calls}); first error: {first_error}"
    elif meta.unrecorded:
        why = (
            "the program's requests were not model calls faultfinder records: "
            f"{_listed(meta.unrecorded)}"
        )
    else:
        why = (
            "the program sent no request through the proxy: it must take its endpoint from "
            "OPENAI_BASE_URL (or ANTHROPIC_BASE_URL); a base URL set in its code or "
            "configuration bypasses the proxy"
        )
        if meta.exit_code:
            why += f"; it exited with status {meta.exit_code} (see stderr.txt)"
    lines.append(f"0 steps: {why}.")
    return lines
