"""Importers: other formats → canonical traces. One module per format, listed in
``faultfinder.registry`` (third parties: entry-point group ``faultfinder.importers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from faultfinder.traces.schema import Trace


@runtime_checkable
class Importer(Protocol):
    """Reads one source format."""

    name: ClassVar[str]
    """Format name for ``--format``."""
    summary: ClassVar[str]
    """One line for help texts."""

    def detect(self, path: Path) -> bool:
        """True when ``path`` (file or directory) is in this format."""
        ...

    def load(self, path: Path, **options: Any) -> list[Trace]:
        """All traces at ``path``. Malformed input raises TraceFormatError (file, field, reason)."""
        ...


def importers() -> dict[str, type[Any]]:
    """Every trace importer that loads, by name: the built-ins and the plugins declared in
    the entry-point group ``faultfinder.importers`` (``faultfinder.registry``)."""
    from faultfinder.registry import IMPORTERS

    return IMPORTERS.load_all()


def get_importer(name: str) -> Importer:
    from faultfinder.registry import IMPORTERS

    importer: Importer = IMPORTERS.get(name)()
    return importer
