"""What the proxy writes while a run goes on (``steps.jsonl``, ``meta.json``), kept free
of the secrets learned after it was written.

Each call is scrubbed with the secrets known when it completes, ``meta.json`` with those
known when it is written. A secret can be learned later in the run: a key that a call's
content quotes is known only once a later call's headers carry it. So
:meth:`RunStore.rescrub <faultfinder.replay.recorder.RunStore.rescrub>` scrubs both files
again as soon as the redactor learns something new: when the proxy learns it from a
request, when a call is appended, and otherwise within a tenth of a second (the session's
watch on the program's output, :func:`faultfinder.replay.output.rescrub_while_running`).
A recorder killed mid-run leaves behind no secret it had learned.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from faultfinder.llm import json_text
from faultfinder.redact import Redactor
from faultfinder.replay.output import replace_file


def scrub_steps(text: str, redactor: Redactor) -> str:
    """The lines of a ``steps.jsonl``, each scrubbed again with every secret known; a
    line that is not JSON (cut short) is scrubbed as text."""
    lines = []
    for line in text.split("\n"):
        try:
            value = json_text.loads(line) if line.strip() else None
        except json_text.JSONTextError:
            value = None
        if value is None:
            lines.append(redactor.text(line))
        else:
            lines.append(json.dumps(redactor.data(value), ensure_ascii=False))
    return "\n".join(lines)


def may_hold(text: str, secrets: Collection[str]) -> bool:
    """Might ``text`` (JSON) hold one of ``secrets``? A secret JSON writes as it is (ASCII,
    no quote, backslash or control character) is looked for as it is; any other is
    assumed to be there."""
    for secret in secrets:
        if not secret.isascii() or json.dumps(secret)[1:-1] != secret or secret in text:
            return True
    return False


def rescrub_steps(path: Path, redactor: Redactor, new: Collection[str] | None = None) -> None:
    """Scrub ``steps.jsonl`` again with every secret known; rewritten (through a synced
    temporary file, renamed) only when something changes. ``new``: the secrets learned
    since it was last scrubbed, when known: a file holding none of them is left as is."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    if new is not None and not may_hold(text, new):
        return
    clean = scrub_steps(text, redactor)
    if clean != text:
        replace_file(path, clean)


def rescrub_json(path: Path, redactor: Redactor, new: Collection[str] | None = None) -> None:
    """Scrub a JSON file of the run (``meta.json``, written with ``indent=2``) again, as
    :func:`rescrub_steps` does; one that is not JSON is scrubbed as text."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    if new is not None and not may_hold(text, new):
        return
    try:
        clean = json.dumps(redactor.data(json_text.loads(text)), indent=2, ensure_ascii=False)
    except json_text.JSONTextError:
        clean = redactor.text(text)
    if clean != text:
        replace_file(path, clean)
