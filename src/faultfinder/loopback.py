"""Loopback hosts, and keeping traffic to them off the user's HTTP proxy; what makes a
URL one that faultfinder can send requests to.

A leaf: the servers (which bind to loopback and check Host headers), the recording proxy
and the export client (whose httpx clients would otherwise send loopback requests to
``HTTP_PROXY``), and ``record``/``replay`` (whose program gets a ``NO_PROXY`` naming the
loopback hosts) share these; the commands check every URL option with :func:`url_problem`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"
"""The address faultfinder's servers bind to unless told otherwise."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""The names every machine gives its loopback, kept off the user's HTTP proxy."""


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (all of 127.0.0.0/8, and ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


URL_FORM = "http(s)://HOST[:PORT][/PATH]"
"""The form :func:`url_problem` asks for, for the messages that name a problem."""


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint, in words that never repeat it (it may hold a
    key), or None when it can: not a URL Python can split ('http://[::1', a port that is
    no number or out of range), not http or https, or no host."""
    try:
        parts = urlsplit(url.strip())
        host, _ = parts.hostname, parts.port  # reading .port checks it
    except ValueError as exc:
        return f"not a valid URL ({_split_failure(exc)})"
    if parts.scheme.lower() not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not host:
        return "a URL that names no host"
    return None


def _split_failure(exc: ValueError) -> str:
    """Why Python could not split a URL, without the part of it that Python's message
    quotes: a "port" that is really a password ('http://user:s3cret') or a host."""
    text = str(exc)
    if text.startswith("Port could not be cast"):
        return "its port is not a number"
    return "Python cannot split it" if "'" in text or '"' in text else text


def direct_to_loopback(urls: Iterable[str | None]) -> dict[str, None]:
    """httpx ``mounts`` that send requests for loopback hosts straight to them, past any
    HTTP_PROXY/HTTPS_PROXY/ALL_PROXY in the environment, which httpx otherwise applies to
    every host (loopback included, unless NO_PROXY names it). The user's proxy stays in
    use for other hosts; it cannot reach this machine's loopback anyway, and would be
    handed the request, keys and all. ``urls``: those the client will call, for a
    loopback address other than the usual names (127.0.0.2)."""
    hosts = set(LOOPBACK_HOSTS)
    for url in urls:
        host = urlsplit(url).hostname if url else None
        if host and is_loopback(host):
            hosts.add(host)
    return {f"all://[{h}]" if ":" in h else f"all://{h}": None for h in sorted(hosts)}


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def past_http_proxy(env: dict[str, str]) -> dict[str, str]:
    """``NO_PROXY``/``no_proxy`` for a program whose environment names an HTTP proxy
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, either case): every host both name,
    and the loopback names, so the program's SDK reaches the proxy on 127.0.0.1 directly
    instead of handing its calls (keys and all) to a proxy that cannot reach this machine.
    Both spellings get the same list, since libraries differ in which one they read. No
    change without a proxy variable."""
    if not any(env.get(v) or env.get(v.upper()) for v in _PROXY_VARIABLES):
        return {}
    hosts: list[str] = []
    for variable in ("NO_PROXY", "no_proxy"):
        for host in env.get(variable, "").split(","):
            if host.strip() and host.strip() not in hosts:
                hosts.append(host.strip())
    hosts += [h for h in LOOPBACK_HOSTS if h not in hosts]
    return {"NO_PROXY": ",".join(hosts), "no_proxy": ",".join(hosts)}
