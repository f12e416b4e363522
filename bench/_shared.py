"""Where the bench scripts find the shared data (never copied into the repository) when no
path is given on their command line.

In order: the folder ``FAULTFINDER_SHARED`` names; ``shared/`` beside the repository the
script lives in (``../shared`` from its root, where CI and the main checkout keep it);
for a script in a git worktree elsewhere (``git worktree add SOMEWHERE``), ``shared/``
beside the main checkout the worktree belongs to, found from the worktree's ``.git``
file. When none exists, the path beside the repository, so the error names where the
data was looked for.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FAULTFINDER_SHARED"
"""The environment variable that points every default at another shared folder."""
ROOT = Path(__file__).resolve().parents[1]
"""The repository (or worktree) these scripts live in."""


def main_checkout(root: Path = ROOT) -> Path | None:
    """The main checkout of the repository when ``root`` is a linked git worktree (its
    ``.git`` is a file naming ``<main>/.git/worktrees/<name>``), else None."""
    marker = root / ".git"
    if not marker.is_file():
        return None
    first = marker.read_text("utf-8", errors="replace").partition("\n")[0]
    if not first.startswith("gitdir:"):
        return None
    gitdir = (root / first.removeprefix("gitdir:").strip()).resolve()
    common_file = gitdir / "commondir"
    if not common_file.is_file():
        return None
    common = (gitdir / common_file.read_text("utf-8").strip()).resolve()
    return common.parent if common.name == ".git" else None


def shared_dir(root: Path = ROOT) -> Path:
    """The shared folder (see the module docstring)."""
    named = os.environ.get(ENV)
    if named:
        return Path(named).expanduser()
    beside = root.parent / "shared"
    if beside.is_dir():
        return beside
    main = main_checkout(root)
    if main is not None and (main.parent / "shared").is_dir():
        return main.parent / "shared"
    return beside


WHO_AND_WHEN_DATA = shared_dir() / "data" / "who-and-when"
"""Who&When's traces: the default DATA of every script that reads them."""
