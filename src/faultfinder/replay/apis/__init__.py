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
one from running code (a test). The proxy asks each adapter in order (the built-ins in
the order the registry lists them, then the plugins by name, so a plugin never takes a
built-in's requests) whether it handles a request; a request no adapter handles is
not a model call (models list, embeddings, files...): it is forwarded unrecorded while
recording, and during a replay only to an upstream named on the command line, listed
apart in the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence
from typing import cast, overload

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
    """One adapter per registered API, in the order they are asked: the built-ins, then
    the ``faultfinder.apis`` entry points by name (a plugin that fails to load is skipped
    with a warning naming it)."""
    return [cls() for cls in APIS.load_all().values()]


class _Adapters(MutableSequence[WireAdapter]):
    """A list of adapters filled by :func:`load_adapters` on first use, not at import:
    importing this module (every recording command does) loads no plugin, so a broken
    one is reported once, while the command runs, and ``--help`` loads none."""

    def __init__(self) -> None:
        self._items: list[WireAdapter] | None = None

    def _filled(self) -> list[WireAdapter]:
        if self._items is None:
            self._items = load_adapters()
        return self._items

    @overload
    def __getitem__(self, index: int) -> WireAdapter: ...
    @overload
    def __getitem__(self, index: slice) -> list[WireAdapter]: ...
    def __getitem__(self, index: int | slice) -> WireAdapter | list[WireAdapter]:
        return self._filled()[index]

    @overload
    def __setitem__(self, index: int, value: WireAdapter) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[WireAdapter]) -> None: ...
    def __setitem__(self, index: int | slice, value: WireAdapter | Iterable[WireAdapter]) -> None:
        items = self._filled()
        if isinstance(index, slice):
            items[index] = cast("Iterable[WireAdapter]", value)
        else:
            items[index] = cast("WireAdapter", value)

    def __delitem__(self, index: int | slice) -> None:
        del self._filled()[index]

    def __len__(self) -> int:
        return len(self._filled())

    def __iter__(self) -> Iterator[WireAdapter]:
        return iter(self._filled())

    def insert(self, index: int, value: WireAdapter) -> None:
        self._filled().insert(index, value)

    def __repr__(self) -> str:
        return repr(self._filled())


ADAPTERS: MutableSequence[WireAdapter] = _Adapters()
"""The adapters in force, asked in order (loaded on first use)."""


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
