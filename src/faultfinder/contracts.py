"""What a component class must have before the registry lets a plugin's be used: one
check for methods, importers and model-API adapters, each naming its members.

A leaf: it imports nothing of faultfinder's, so the modules that define each kind of
component (``judging.method``, ``traces.importers.base``, ``replay.apis.base``) can use it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence


def interface_problem(
    cls: object,
    kind: str,
    follows: str,
    *,
    texts: Sequence[str] = (),
    flags: Sequence[str] = (),
    calls: Sequence[str] = (),
    others: Sequence[str] = (),
    wrong: Sequence[tuple[str, str]] = (),
    bare: bool = False,
) -> str | None:
    """What keeps ``cls`` from being a ``kind`` class, as a phrase ('is not a trace
    importer: it lacks load (an importer class follows ...)'), or None.

    ``texts`` must be strings, ``flags`` True or False, ``calls`` callable and ``others``
    merely present; ``wrong`` holds further (member, problem) pairs the caller found,
    reported only when that member is present. ``bare``: faultfinder makes its instances
    with no arguments, so a constructor that requires one is a problem. ``follows`` ends
    the phrase: the protocol to follow."""
    if not isinstance(cls, type):
        return f"is not a {kind}: it is a {type(cls).__name__}, not a class"
    members = (*texts, *others, *flags, *calls)
    missing = [a for a in members if not hasattr(cls, a)]
    found = [a for a in members if a not in missing]
    problems = [f"{a} is not a string" for a in texts if a in found and not _is(cls, a, str)]
    problems += [m for a, m in wrong if a in found]
    problems += [f"{a} is not True or False" for a in flags if a in found and not _is(cls, a, bool)]
    problems += [
        f"{a} is not callable" for a in calls if a in found and not callable(getattr(cls, a))
    ]
    if bare and (needs := _required_arguments(cls)):
        problems.append(f"its constructor requires {', '.join(needs)}, and it is made with none")
    if not missing and not problems:
        return None
    lacks = [f"it lacks {', '.join(missing)}"] if missing else []
    return f"is not a {kind}: {'; '.join(lacks + problems)} ({follows})"


def _required_arguments(cls: type) -> list[str]:
    """The parameters ``cls()`` lacks (none when its signature cannot be read: a class
    written in C, which is then left to fail where it is made)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [
        name
        for name, p in signature.parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _is(cls: type, member: str, kind: type) -> bool:
    return isinstance(getattr(cls, member), kind)
