"""Name → method class. Every module in ``faultfinder.methods`` is imported once, and
classes decorated with :func:`register` become available by name."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Any, TypeVar

from pydantic import ValidationError

from faultfinder.errors import ConfigError, UnknownNameError
from faultfinder.methods.base import Method

_METHODS: dict[str, type[Any]] = {}
_discovered = False
_NOT_METHODS = {"base", "registry", "render", "answers", "grammars"}

M = TypeVar("M", bound=type[Any])


def register(cls: M) -> M:
    """Class decorator: make a method available under ``cls.name``."""
    name = cls.name
    if name in _METHODS and _METHODS[name] is not cls:
        raise ValueError(f"Two methods are registered as '{name}'")
    if not hasattr(cls, "presets"):
        cls.presets = {}
    if not hasattr(cls, "needs_model"):
        cls.needs_model = True
    _METHODS[name] = cls
    return cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import faultfinder.methods as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name in _NOT_METHODS:
            continue
        importlib.import_module(f"{package.__name__}.{info.name}")
    _discovered = True


def available() -> dict[str, type[Any]]:
    """All registered methods by name."""
    _discover()
    return dict(sorted(_METHODS.items()))


def is_floor(method: Any) -> bool:
    """Whether a method class (or instance) is a floor (``random``, ``baseline``): a score
    the others must beat, listed last by ``report`` and computed by ``report --floors``."""
    return bool(getattr(method, "floor", False))


def needs_model(method: Any) -> bool:
    """Whether a method class (or instance) calls a model; False for ``random``, the
    ``baseline`` floors and ``shortlist``, which then run without one (no --model needed)."""
    return bool(getattr(method, "needs_model", True))


def get_method_class(name: str) -> type[Any]:
    methods = available()
    if name not in methods:
        raise UnknownNameError("method", name, list(methods))
    return methods[name]


def create_method(spec: str, **overrides: Any) -> Method:
    """Build a method from 'name' or 'name:preset', with config overrides on top."""
    name, _, preset = spec.partition(":")
    cls = get_method_class(name)
    settings: dict[str, Any] = {}
    if preset:
        if preset not in cls.presets:
            raise UnknownNameError(f"preset of method '{name}'", preset, list(cls.presets))
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
    method: Method = cls(config)
    return method
