"""What a replay takes from a run directory, and only on the user's word.

A run directory is untrusted input: nothing read from it is run or contacted unless the
command line says so. The recorded command is shown for reference and never run; a
recorded upstream receives live calls (and the user's key) only with ``--trust-run``; an
API the recording sent to an upstream of its own is never sent to another one's instead.
These rules are shared by ``replay``, ``debug``, ``proxy`` and ``verify-edit``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from faultfinder.errors import ConfigError
from faultfinder.redact import REDACTED
from faultfinder.replay.recorder import RunMeta

__all__ = [
    "describe_upstreams",
    "misrouted_apis",
    "replay_upstream",
    "replay_upstreams",
    "require_api_upstreams",
    "require_upstream",
    "stored_command_note",
]


def stored_command_note(meta: RunMeta) -> str:
    """The recorded command, quoted for reference only (it is never run)."""
    if not meta.command:
        return "the recording names no command"
    return "the recording's command, shown for reference and never run: " + shlex.join(meta.command)


def replay_upstream(parent: RunMeta, upstream: str | None, trust_run: bool) -> str | None:
    """The upstream a replay may send live calls (and the user's key) to.

    Only an upstream the user named, or the recorded one when the user trusts the run;
    None when neither (then any live call fails without leaving the machine).
    """
    if upstream:
        return upstream
    if trust_run and parent.upstream:
        return _usable(parent.upstream, "--upstream URL")
    return None


def replay_upstreams(
    parent: RunMeta, upstreams: Mapping[str, str], trust_run: bool
) -> dict[str, str]:
    """The per-API upstreams of a replay: those the user named (``--api-upstream``), and
    with ``trust_run`` the recorded ones for the other APIs."""
    recorded = parent.upstreams if trust_run else {}
    trusted = {
        api: _usable(url, f"--api-upstream {api}=URL")
        for api, url in recorded.items()
        if api not in upstreams
    }
    return {**trusted, **upstreams}


def _usable(recorded: str, option: str) -> str:
    """A recorded upstream URL, unless credentials were cut out of it when it was
    written (then it cannot be used as it stands: the user names it again)."""
    if REDACTED in recorded:
        raise ConfigError(
            f"The run directory names the upstream {recorded!r}, whose credentials were not "
            f"kept; pass {option} instead of relying on --trust-run for it."
        )
    return recorded


def describe_upstreams(meta: RunMeta) -> str:
    """The upstreams a run names, for a message: 'http://a/v1' (messages: 'http://b/v1')."""
    main = repr(meta.upstream) if meta.upstream else "no upstream"
    if not meta.upstreams:
        return main
    own = ", ".join(f"{api}: {url!r}" for api, url in meta.upstreams.items())
    return f"{main} ({own})"


def _same_url(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")


def misrouted_apis(
    parent: RunMeta, upstream: str | None, upstreams: Mapping[str, str]
) -> dict[str, str]:
    """APIs the recording sent to an upstream of their own that this replay would send
    to ``upstream`` instead (no upstream of their own here): {API: recorded URL}.

    Such a call carries the program's key for another provider (Anthropic's x-api-key to
    an OpenAI endpoint): it must not go there silently. An API recorded at the main
    upstream follows ``upstream`` wherever the user points it, as before.
    """
    out: dict[str, str] = {}
    for api, recorded in parent.upstreams.items():
        if api in upstreams or _same_url(recorded, parent.upstream):
            continue
        if upstream is not None and not _same_url(recorded, upstream):
            out[api] = recorded
    return out


def require_upstream(parent: RunMeta, upstream: str | None) -> None:
    """Refuse a replay that makes live calls when no upstream may receive them."""
    if upstream:
        return
    named = f" (the recording names {describe_upstreams(parent)})" if parent.upstream else ""
    raise ConfigError(
        f"This replay makes live calls: pass --upstream URL{named}; faultfinder does not "
        "send your key to an endpoint read from a run directory unless you pass --trust-run."
    )


def require_api_upstreams(
    parent: RunMeta, upstream: str | None, upstreams: Mapping[str, str]
) -> None:
    """Refuse a replay that makes live calls when an API recorded at an upstream of its
    own would go to ``upstream`` instead (see :func:`misrouted_apis`); one line, since
    some callers show only the first."""
    missing = misrouted_apis(parent, upstream, upstreams)
    if not missing:
        return
    apis = ", ".join(missing)
    recorded = ", ".join(f"{api} -> {url!r}" for api, url in missing.items())
    options = " ".join(f"--api-upstream {api}=URL" for api in missing)
    raise ConfigError(
        f"This replay would send the program's {apis} calls (and its key for them) to "
        f"--upstream {upstream!r}, but the recording sent them to an upstream of their own "
        f"({recorded}): pass {options} (or --trust-run to use the recorded one); nothing "
        "was run and no call was sent."
    )
