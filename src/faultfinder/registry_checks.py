"""What the registry checks of a component once it is imported: that it is what its
group holds (a method, a trace importer, a model-API adapter, by the module that says what
one is, imported only then) and that it calls itself by the name it is registered under.

A leaf beside ``registry``: it imports nothing of faultfinder's until a check runs.
"""

from __future__ import annotations

from typing import Any


def _misnamed(name: str, cls: Any, reader: str) -> str | None:
    """What is wrong with a class registered as ``name`` that has a ``name`` of its own
    (None: it has ``name``). ``reader`` says what reads the class's name, so a mismatch
    mislabels or misroutes its output."""
    own = getattr(cls, "name", None)
    if own == name:
        return None
    return (
        f"calls itself {own!r}: the entry point's name must be the class's `name`, which {reader}"
    )


def method_problem(name: str, cls: Any) -> str | None:
    """What is wrong with the class registered as the method ``name``: not a method class
    (``judging.method.method_problem``), or a name of its own."""
    from faultfinder.judging.method import method_problem as not_a_method

    problem = not_a_method(cls)
    if problem is not None:
        return problem
    return _misnamed(name, cls, "its results carry as their method")


def importer_problem(name: str, cls: Any) -> str | None:
    """What is wrong with the class registered as the trace format ``name``: not an
    importer class (``traces.importers.base.importer_problem``: it lacks ``detect``,
    ``load``...), or a ``name`` of its own. ``--format NAME`` finds the importer by its
    entry point's name while the traces it reads carry the class's ``name`` as their
    ``source.format``, so an importer called otherwise would label its traces with a
    format no command knows."""
    from faultfinder.traces.importers.base import importer_problem as not_an_importer

    problem = not_an_importer(cls)
    if problem is not None:
        return problem
    return _misnamed(name, cls, "the traces it reads carry as their source format")


def api_problem(name: str, cls: Any) -> str | None:
    """What is wrong with the class registered as the model API ``name``: not an adapter
    class (``replay.apis.base.adapter_problem``: it lacks a member of ``WireAdapter``,
    which the proxy would call in the middle of a run), or a ``name`` of its own.
    Recorded calls carry the adapter's ``name`` and a replay reads each call with the
    adapter of that name, so an adapter called otherwise ('chat', or the empty name of an
    ``AdapterBase`` subclass that sets none) would have its calls read as another API's."""
    from faultfinder.replay.apis.base import adapter_problem as not_an_adapter

    problem = not_an_adapter(cls)
    if problem is not None:
        return problem
    return _misnamed(name, cls, "recorded calls carry and replays look the adapter up by")
