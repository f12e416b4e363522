"""One small registry for what faultfinder can be extended with: attribution methods,
trace importers, model backends and the model APIs the recording proxy speaks.

Built-ins are listed here by name as ``"module:attribute"`` references, so listing names
imports nothing. Third-party packages add their own through entry points in the groups
``faultfinder.methods``, ``faultfinder.importers``, ``faultfinder.backends`` and
``faultfinder.apis`` (see docs/plugins.md)::

    [project.entry-points."faultfinder.methods"]
    my-method = "my_package.my_method:MyMethod"

A component is imported the first time it is asked for. A plugin that cannot be imported
is skipped with a warning naming it and the reason, never a crash; a plugin may not take a
built-in's name (the built-in wins, with a warning). Where order matters (the importers
asked to detect a file's format, the model APIs asked whether they handle a request) the
built-ins come first, in the order listed here, then the plugins by name: a plugin adds a
format or an API, it never takes a built-in's traffic.

This module is a leaf: it imports nothing of faultfinder's but ``errors`` and
``registry_checks``, whose checks of a component once it is imported import the module
that says what one is: a method class ``judging.method``, an importer class
``traces.importers.base``, a model-API adapter class ``replay.apis.base``.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from faultfinder import plugin_groups
from faultfinder.errors import ConfigError, FaultfinderWarning, UnknownNameError
from faultfinder.registry_checks import api_problem, importer_problem, method_problem

if TYPE_CHECKING:
    from faultfinder.judging.method import Method

T = TypeVar("T")

BUILTIN = "built-in"
_GROUPS: list[str] = []  # every registry's entry-point group


class PluginWarning(FaultfinderWarning):
    """A plugin's entry point could not be loaded; it was skipped."""


@dataclass(frozen=True)
class Entry:
    """One registered component, not yet imported."""

    name: str
    """The name users type (``--method NAME``, ``--format NAME``, ``--model NAME:…``)."""
    target: str
    """``module:attribute`` to import."""
    origin: str
    """``built-in``, or the distribution that declared it: ``plugin my-dist 1.0``."""


class Registry(Generic[T]):
    """Components of one kind by name: the built-ins listed here, then entry points."""

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: dict[str, str],
        check: Callable[[str, Any], str | None] | None = None,
    ) -> None:
        self.kind = kind
        """What the components are, for messages ('method', 'trace format', …)."""
        self.group = group
        _GROUPS.append(group)
        """The entry-point group third parties declare their components in."""
        self._builtins = dict(builtins)
        self._check = check
        """Given a name and what it imported, what is wrong with it (None: nothing)."""
        self._entries: dict[str, Entry] | None = None
        self._loaded: dict[str, T] = {}
        self._broken: set[str] = set()
        self._clashes: dict[str, list[str]] = {}
        """Per name, why entry points declaring it were ignored (it was taken)."""
        self._told: set[str] = set()
        """The names whose clashes have been warned about."""

    def entries(self) -> dict[str, Entry]:
        """Every component by name, without importing any, in the order they are asked
        in: the built-ins in the order listed here, then the plugins by name. For
        listings: an entry point ignored because its name is taken is warned about here
        (once), as it is when its name is looked up (:meth:`get`), and nowhere else, so a
        command that uses no component of this kind never shows it."""
        found = self._found()
        for name in list(self._clashes):
            self._tell_clash(name)
        plugin_groups.tell(_GROUPS, _warn)  # entry points in a group no registry reads
        return found

    def _found(self) -> dict[str, Entry]:
        """:meth:`entries` without a word about clashes, for looking one name up."""
        if self._entries is None:
            found = {name: Entry(name, target, BUILTIN) for name, target in self._builtins.items()}
            points = _entry_points(self.group)
            for ep in sorted(points, key=lambda p: (p.name, _origin(p), p.value)):
                origin = _origin(ep)
                if ep.name in found:
                    first = found[ep.name]
                    if first.origin != origin or first.target != ep.value:
                        taker = (
                            f"the built-in one ({first.target})"
                            if first.origin == BUILTIN
                            else f"{first.origin} ({first.target})"
                        )
                        self._clashes.setdefault(ep.name, []).append(
                            f"The {self.kind} '{ep.name}' from {origin} ({ep.value}) is "
                            f"ignored: the name is taken by {taker}. Give it another name in "
                            "that package's entry points."
                        )
                    continue
                found[ep.name] = Entry(ep.name, ep.value, origin)
            self._entries = found
        return self._entries

    def _tell_clash(self, name: str) -> None:
        """Warn (once) about the entry points ignored because ``name`` was taken."""
        if name in self._clashes and name not in self._told:
            self._told.add(name)
            for message in self._clashes[name]:
                _warn(message)

    def entry(self, name: str) -> Entry | None:
        """The component registered as ``name`` (None: none is), without importing it; a
        lookup: only entry points ignored because they declare ``name`` too are warned
        about, not those of other names."""
        found = self._found().get(name)
        self._tell_clash(name)
        return found

    def names(self) -> list[str]:
        """All names, sorted; nothing is imported."""
        return sorted(self.entries())

    def origin(self, name: str) -> str:
        """Where a component comes from: 'built-in' or 'plugin DIST VERSION'."""
        return self._found()[name].origin

    def get(self, name: str) -> T:
        """The component registered as ``name``, imported on first use. An unknown name
        raises UnknownNameError (with a 'did you mean' among the components that load); a
        plugin that cannot be imported, or that the registry's check refuses, raises
        ConfigError naming the plugin and the reason."""
        entries = self._found()
        self._tell_clash(name)
        if name in self._loaded:
            return self._loaded[name]
        if name not in entries:
            raise UnknownNameError(self.kind, name, self.available())
        entry = entries[name]
        try:
            value: T = _load(entry.target)
        except Exception as exc:
            if entry.origin == BUILTIN:
                raise
            raise ConfigError(
                f"The {self.kind} '{name}' from {entry.origin} ({entry.target}) could not be "
                f"loaded: {type(exc).__name__}: {exc}. Reinstall or remove that package."
            ) from None
        problem = self._check(name, value) if self._check is not None else None
        if problem is not None:
            if entry.origin == BUILTIN:
                raise ConfigError(f"The {self.kind} '{name}' ({entry.target}) {problem}.")
            raise ConfigError(
                f"The {self.kind} '{name}' from {entry.origin} ({entry.target}) {problem}. "
                "Fix or remove that package."
            )
        self._loaded[name] = value
        return value

    def find(self, name: str) -> T | None:
        """The component registered as ``name``, importing that one alone; None when no
        component has that name, or when it is a plugin that does not load or that the
        check refuses (warned once, naming it). For readers of names written elsewhere (a
        results file's method labels), which must not import every plugin to look up a few."""
        entry = self._found().get(name)
        if entry is None:
            return None
        try:
            return self.get(name)
        except ConfigError as exc:
            if entry.origin == BUILTIN:
                raise
            self._warn_once(name, str(exc))
            return None

    def load_all(self) -> dict[str, T]:
        """Every component that loads, in the order of :meth:`entries` (built-ins first,
        then plugins by name); a plugin that does not load, or that the check refuses, is
        skipped with a warning naming it (once)."""
        result: dict[str, T] = {}
        for name, entry in self.entries().items():
            try:
                result[name] = self.get(name)
            except ConfigError as exc:
                if entry.origin == BUILTIN:
                    raise
                self._warn_once(name, str(exc))
        return result

    def available(self) -> list[str]:
        """The names that can be used, sorted: every built-in, and each plugin that loads
        (one that does not is left out, with its warning). Imports the plugins only."""
        usable: list[str] = []
        for name, entry in self.entries().items():
            if entry.origin != BUILTIN:
                try:
                    self.get(name)
                except ConfigError as exc:
                    self._warn_once(name, str(exc))
                    continue
            usable.append(name)
        return sorted(usable)

    def skip(self, name: str, action: str, exc: Exception) -> bool:
        """A loaded plugin's ``action`` (``"detect()"``...) raised ``exc``: warn once, naming
        the plugin and its package, and return True; the caller skips it. False for a
        built-in (or an unknown name): its error is a bug to show, the caller re-raises."""
        entry = self._found().get(name)
        if entry is None or entry.origin == BUILTIN:
            return False
        self._warn_once(
            name,
            f"The {self.kind} '{name}' from {entry.origin} ({entry.target}) was skipped: its "
            f"{action} raised {type(exc).__name__}: {exc}. Report it to that package's authors.",
        )
        return True

    def failure(self, name: str, action: str, exc: Exception) -> ConfigError | None:
        """A loaded plugin's ``action`` (``"its load() of run.log"``...) raised ``exc``, an
        exception of a type the caller does not expect: the one-line error naming the plugin,
        its package and the exception, for the caller to raise (``from None``). None for a
        built-in (or an unknown name): its error is a bug to show, the caller re-raises."""
        message = " ".join(str(exc).split())
        said = f"raised {type(exc).__name__}" + (f": {message}" if message else "")
        return self.refused(name, f"failed: {action} {said}")

    def refused(self, name: str, problem: str) -> ConfigError | None:
        """A loaded plugin did what its kind must not (``problem``: 'returned a dict from
        its load() of run.log, ...'): the one-line error naming the plugin and its package,
        for the caller to raise. None for a built-in (or an unknown name): its misbehaviour
        is a bug to show, the caller raises its own error."""
        entry = self._found().get(name)
        if entry is None or entry.origin == BUILTIN:
            return None
        return ConfigError(
            f"The {self.kind} '{name}' from {entry.origin} ({entry.target}) {problem}"
        )

    def skipped(self, name: str) -> bool:
        """True once a plugin has been skipped with a warning (:meth:`skip`, or a failed
        load)."""
        return name in self._broken

    def _warn_once(self, name: str, message: str) -> None:
        if name not in self._broken:
            self._broken.add(name)
            _warn(message)

    def add(self, name: str, value: T, origin: str = "in-process") -> None:
        """Register a component from running code (a test double, a notebook): it is
        found by name like any other until :meth:`remove`."""
        entries = self._found()
        if name in entries and entries[name].origin != origin:
            raise ValueError(f"{self.kind} '{name}' is registered already ({entries[name].origin})")
        entries[name] = Entry(name, f"<{origin}>", origin)
        self._loaded[name] = value

    def remove(self, name: str) -> None:
        """Forget a component registered with :meth:`add`."""
        self._found().pop(name, None)
        self._loaded.pop(name, None)

    def reset(self) -> None:
        """Forget what was found and loaded (tests; after installing a plugin)."""
        self._entries = None
        self._loaded.clear()
        self._broken.clear()
        self._clashes.clear()
        self._told.clear()


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    try:
        return list(metadata.entry_points(group=group))
    except Exception as exc:  # a broken distribution's metadata must not stop the CLI
        _warn(
            f"The entry points of group '{group}' could not be read ({exc}): no plugin of "
            "that group is used. Reinstall or remove the package whose metadata is broken."
        )
        return []


def _origin(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"plugin {dist.name} {dist.version}" if dist else "plugin"


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attr.split(".") if attr else []:
        value = getattr(value, part)
    return value


def _warn(message: str) -> None:
    warnings.warn(message, PluginWarning, stacklevel=3)


# -- the built-ins -------------------------------------------------------------------------


METHODS: Registry[type[Method]] = Registry(
    "method",
    "faultfinder.methods",
    {
        "random": "faultfinder.methods.random:RandomMethod",
        "baseline": "faultfinder.methods.baseline:BaselineMethod",
        "all-at-once": "faultfinder.methods.whowhen.all_at_once:AllAtOnceMethod",
        "step-by-step": "faultfinder.methods.whowhen.step_by_step:StepByStepMethod",
        "binary-search": "faultfinder.methods.whowhen.binary_search:BinarySearchMethod",
        "hybrid": "faultfinder.methods.whowhen.hybrid:HybridMethod",
        "echo": "faultfinder.methods.echo.method:EchoMethod",
        "chief": "faultfinder.methods.chief:ChiefMethod",
        "agentic": "faultfinder.methods.agentic.method:AgenticMethod",
        "shortlist": "faultfinder.methods.shortlist:ShortlistMethod",
        "compose": "faultfinder.methods.compose:ComposeMethod",
    },
    check=method_problem,
)
"""Attribution methods: classes following ``faultfinder.judging.method.Method``."""


IMPORTERS: Registry[type[Any]] = Registry(
    "trace format",
    "faultfinder.importers",
    {
        "ag2": "faultfinder.traces.importers.ag2:Ag2Importer",
        "generic": "faultfinder.traces.importers.generic:GenericImporter",
        "langfuse": "faultfinder.traces.importers.langfuse:LangfuseImporter",
        "langsmith": "faultfinder.traces.importers.langsmith:LangsmithImporter",
        "mlflow": "faultfinder.traces.importers.mlflow:MlflowImporter",
        "otlp": "faultfinder.traces.importers.otlp:OtlpImporter",
        "phoenix": "faultfinder.traces.importers.phoenix:PhoenixImporter",
        "traceelephant": "faultfinder.traces.importers.traceelephant:TraceElephantImporter",
        "who-and-when": "faultfinder.traces.importers.whoandwhen:WhoAndWhenImporter",
    },
    check=importer_problem,
)
"""Trace importers: classes following ``faultfinder.traces.importers.Importer``."""

BACKENDS: Registry[Any] = Registry(
    "model backend",
    "faultfinder.backends",
    {
        "openai": "faultfinder.llm.registry:openai_backend",
        "anthropic": "faultfinder.llm.anthropic_messages:anthropic_backend",
        "local": "faultfinder.llm.registry:local_backend",
        "scripted": "faultfinder.llm.registry:scripted_backend",
        "function": "faultfinder.llm.registry:function_backend",
        "none": "faultfinder.llm.registry:no_backend",
    },
)
"""Model backends: factories following ``faultfinder.llm.registry.BackendFactory``, called
with the part of ``--model KIND:NAME`` after the colon and the endpoint options."""


APIS: Registry[type[Any]] = Registry(
    "model API",
    "faultfinder.apis",
    {
        "chat": "faultfinder.replay.apis.chat:ChatAdapter",
        "responses": "faultfinder.replay.apis.responses:ResponsesAdapter",
        "messages": "faultfinder.replay.apis.messages:MessagesAdapter",
    },
    check=api_problem,
)
"""Model wire formats the recording proxy speaks: classes following
``faultfinder.replay.apis.base.WireAdapter``, one per API."""


# -- methods -------------------------------------------------------------------------------


def method_class(name: str) -> type[Method]:
    """The method class registered as ``name`` (without a preset); a class that is not a
    method, or whose own ``name`` differs, is refused (ConfigError)."""
    return METHODS.get(name)


def methods() -> dict[str, type[Method]]:
    """Every method that loads, by name (a broken plugin, one that is not a method, or one
    registered under a name that is not its class's, is skipped with a warning)."""
    return METHODS.load_all()


def with_shortlist_weights(
    spec: str, overrides: dict[str, Any], path: str | None
) -> dict[str, Any]:
    """``overrides`` plus ``model_path=path`` when the method ``spec`` names ranks with
    shortlist weights (it has a ``model_path`` option: shortlist, compose) and ``overrides``
    does not set one already (``--shortlist-weights``)."""
    cls = method_class(spec.partition(":")[0])
    if path is None or "model_path" not in cls.Config.model_fields or "model_path" in overrides:
        return overrides
    return {**overrides, "model_path": path}


def create_method(spec: str, **overrides: Any) -> Method:
    """Build a method from 'name' or 'name:preset', with config overrides on top."""
    from pydantic import ValidationError

    name, _, preset = spec.partition(":")
    cls = method_class(name)
    settings: dict[str, Any] = {}
    if preset:
        if not cls.presets:  # not "Available: (none)": say how this method is set
            raise ConfigError(
                f"Method '{name}' has no presets, so '{spec}' names none; set its options "
                f"with --set key=value (they are listed by `faultfinder methods {name}`)."
            )
        if preset not in cls.presets:
            known = [f"{name}:{p}" for p in cls.presets]
            raise UnknownNameError("method preset", spec, known)
        settings.update(cls.presets[preset])
    settings.update(overrides)
    try:
        config = cls.Config(**settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            valid = list(cls.Config.model_fields)
            close = difflib.get_close_matches(where, valid, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(
                f"Method '{spec}' has no option '{where}'.{hint} Options: {', '.join(valid)} "
                f"(see `faultfinder methods {name}`)."
            ) from None
        raise ConfigError(f"Method '{spec}': option '{where}': {first['msg']}") from None
    return cls(config)
