"""Importers: other formats → canonical traces. One module per format, registered by name."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from faultfinder.errors import UnknownNameError
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


_IMPORTERS: dict[str, type[Any]] = {}
_discovered = False
C = TypeVar("C", bound=type[Any])


def register_importer(cls: C) -> C:
    _IMPORTERS[cls.name] = cls
    return cls


def importers() -> dict[str, type[Any]]:
    global _discovered
    if not _discovered:
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _discovered = True
    return dict(sorted(_IMPORTERS.items()))


def get_importer(name: str) -> Importer:
    known = importers()
    if name not in known:
        raise UnknownNameError("trace format", name, list(known))
    importer: Importer = known[name]()
    return importer
