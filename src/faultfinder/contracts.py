"""What a component class must have before the registry lets a plugin's be used: one
check for methods, importers and model-API adapters, each naming its members, and one for
the objects a plugin makes (the backend a backend factory builds).

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
    problems = _member_problems(cls, texts, flags, calls, others, wrong)
    if bare and (needs := _required_arguments(cls)):
        problems.append(f"its constructor requires {', '.join(needs)}, and it is made with none")
    return f"is not a {kind}: {'; '.join(problems)} ({follows})" if problems else None


def instance_problem(
    value: object,
    kind: str,
    follows: str,
    *,
    texts: Sequence[str] = (),
    flags: Sequence[str] = (),
    calls: Sequence[str] = (),
) -> str | None:
    """What keeps ``value``, an object a plugin made (a backend its factory built), from
    being a ``kind``, as a phrase ('is a dict, not a model backend: it lacks name ...'),
    or None. Members are checked as :func:`interface_problem` checks a class's, on the
    object itself, so those its constructor sets count."""
    problems = _member_problems(value, texts, flags, calls, (), ())
    if not problems:
        return None
    return f"is a {type(value).__name__}, not a {kind}: {'; '.join(problems)} ({follows})"


def _member_problems(
    value: object,
    texts: Sequence[str],
    flags: Sequence[str],
    calls: Sequence[str],
    others: Sequence[str],
    wrong: Sequence[tuple[str, str]],
) -> list[str]:
    """What ``value`` (a class, or an object) lacks or has wrong among its members."""
    members = (*texts, *others, *flags, *calls)
    missing = [a for a in members if not hasattr(value, a)]
    found = [a for a in members if a not in missing]
    problems = [f"it lacks {', '.join(missing)}"] if missing else []
    problems += [f"{a} is not a string" for a in texts if a in found and not _is(value, a, str)]
    problems += [m for a, m in wrong if a in found]
    problems += [
        f"{a} is not True or False" for a in flags if a in found and not _is(value, a, bool)
    ]
    problems += [
        f"{a} is not callable" for a in calls if a in found and not callable(getattr(value, a))
    ]
    return problems


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


def _is(value: object, member: str, kind: type) -> bool:
    return isinstance(getattr(value, member), kind)
