"""Writing a bench script's figures into its own marked section of bench/README.md."""

from __future__ import annotations

import sys
from pathlib import Path


def write_section(readme: Path, begin: str, end: str, text: str, heading: str) -> None:
    """Replace the text between the ``begin`` and ``end`` markers, or append a new section
    headed ``heading`` (markdown, ending in a blank line) with the markers."""
    current = readme.read_text(encoding="utf-8")
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        readme.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")
    else:
        new = current.rstrip("\n") + "\n" + heading + f"{begin}\n{text}\n{end}\n"
        readme.write_text(new, encoding="utf-8")
    print(f"\nwritten into {readme.name}", file=sys.stderr)
