"""Model wire formats the proxy records and replays: one adapter module per API.

=============  ==========================  =============================================
name           path                        module
=============  ==========================  =============================================
``chat``       ``POST /v1/chat/completions``  :mod:`faultfinder.replay.apis.chat`
``responses``  ``POST /v1/responses``         :mod:`faultfinder.replay.apis.responses`
``messages``   ``POST /v1/messages``          :mod:`faultfinder.replay.apis.messages`
=============  ==========================  =============================================

Every path also works behind an agent prefix (``/agent/<name>/v1/...``). The contract an
adapter follows is :class:`~faultfinder.replay.apis.base.WireAdapter` (read its module
docstring); :class:`~faultfinder.replay.apis.base.AdapterBase` gives the members most
APIs share. To add an API: write one module with one class following it and list it in
``faultfinder.registry.APIS`` (in the tree), or declare it in the entry-point group
``faultfinder.apis`` of a package of your own (docs/plugins.md); :func:`register` adds
one from running code (a test). The proxy
asks each adapter in order whether it handles a request; a request no adapter handles is
not a model call (models list, embeddings, files...): it is forwarded unrecorded while
recording, and during a replay only to an upstream named on the command line, listed
apart in the report.
"""

from __future__ import annotations

from faultfinder.registry import APIS
from faultfinder.replay.apis.base import (
    AdapterBase,
    CanonicalReply,
    Chains,
    SSEEvent,
    StreamAccumulator,
    WireAdapter,
    encode_sse,
)
from faultfinder.replay.apis.chat import ChatAdapter
from faultfinder.replay.apis.responses import ResponsesAdapter


def load_adapters() -> list[WireAdapter]:
    """One adapter per registered API: the built-ins and the ``faultfinder.apis`` entry
    points (a plugin that fails to load is skipped with a warning naming it)."""
    return [cls() for cls in APIS.load_all().values()]


ADAPTERS: list[WireAdapter] = load_adapters()
"""The adapters in force, asked in order."""


def register(adapter: WireAdapter) -> WireAdapter:
    """Add ``adapter`` (replacing one of the same name)."""
    ADAPTERS[:] = [a for a in ADAPTERS if a.name != adapter.name]
    ADAPTERS.append(adapter)
    return adapter


def adapter_for(method: str, path: str) -> WireAdapter | None:
    """The adapter of a model call ``method path`` (agent prefix removed), or None."""
    return next((a for a in ADAPTERS if a.handles(method, path)), None)


def adapter_named(name: str) -> WireAdapter:
    """The adapter called ``name`` (recorded calls name theirs)."""
    for adapter in ADAPTERS:
        if adapter.name == name:
            return adapter
    known = ", ".join(a.name for a in ADAPTERS)
    raise KeyError(f"no adapter for the {name!r} API (known: {known})")


__all__ = [
    "ADAPTERS",
    "AdapterBase",
    "CanonicalReply",
    "Chains",
    "ChatAdapter",
    "ResponsesAdapter",
    "SSEEvent",
    "StreamAccumulator",
    "WireAdapter",
    "adapter_for",
    "adapter_named",
    "encode_sse",
    "load_adapters",
    "register",
]
