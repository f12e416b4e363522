"""Importers: other formats → canonical traces. One module per format, listed in
``faultfinder.registry`` (third parties: entry-point group ``faultfinder.importers``).
What an importer is, :class:`Importer`, and the registry's check of one are in
:mod:`faultfinder.traces.importers.base`."""

from __future__ import annotations

from typing import Any

from faultfinder.traces.importers.base import Importer, importer_problem

__all__ = ["Importer", "get_importer", "importer_problem", "importers"]


def importers() -> dict[str, type[Any]]:
    """Every trace importer that loads, by name: the built-ins and the plugins declared in
    the entry-point group ``faultfinder.importers`` (``faultfinder.registry``)."""
    from faultfinder.registry import IMPORTERS

    return IMPORTERS.load_all()


def get_importer(name: str) -> Importer:
    from faultfinder.registry import IMPORTERS

    importer: Importer = IMPORTERS.get(name)()
    return importer
