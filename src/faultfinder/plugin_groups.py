"""Entry points a package declares in a ``faultfinder.`` group that no registry reads.

A plugin declared under ``faultfinder.method`` (for ``faultfinder.methods``), or under a
kind faultfinder has none of (``faultfinder.executors``), is never loaded; without a word
it is simply missing from every listing and its author cannot tell why. The registry
(``registry.py``) asks :func:`tell` where components are listed; each is warned of once a
process. A leaf: the standard library only.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from importlib import metadata

PREFIX = "faultfinder."
"""The prefix of every group faultfinder reads, and so of a group meant for it."""
_told = False


def tell(groups: Sequence[str], warn: Callable[[str], object]) -> None:
    """Give ``warn`` each message of :func:`strays`, the first time a process asks."""
    global _told
    if not _told:
        _told = True
        for message in strays(groups):
            warn(message)


def strays(groups: Sequence[str]) -> list[str]:
    """One message per installed entry point in a ``faultfinder.`` group outside
    ``groups`` (the ones the registries read), naming it, its distribution and what it
    points at, the group, and the known group it may have meant. Broken metadata gives no
    message here: the registry warns of it when it reads its own group."""
    try:
        found = {
            (ep.group, ep.name, ep.value, _origin(dist))
            for dist in metadata.distributions()
            for ep in dist.entry_points
            if ep.group.startswith(PREFIX) and ep.group not in groups
        }
    except Exception:
        return []
    messages: list[str] = []
    for group, name, value, origin in sorted(found):
        close = difflib.get_close_matches(group, groups, n=1, cutoff=0.9)
        meant = f" Did you mean '{close[0]}'?" if close else ""
        messages.append(
            f"The entry point '{name}' from {origin} ({value}) is ignored: faultfinder reads "
            f"no group '{group}', only {', '.join(groups)}.{meant} Fix that package."
        )
    return messages


def _origin(dist: metadata.Distribution) -> str:
    """As the registry names a plugin's origin: 'plugin DIST VERSION'."""
    return f"plugin {dist.name} {dist.version}"
