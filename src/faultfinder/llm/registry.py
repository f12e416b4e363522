"""Turn a model spec such as ``openai:gpt-4o`` or ``local`` into a backend."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol, cast

from faultfinder.errors import ConfigError, FaultfinderError, UnknownNameError
from faultfinder.llm.base import Backend, backend_problem

BACKENDS: dict[str, str] = {
    "openai": "OpenAI-compatible endpoint: openai:MODEL (--base-url, key from OPENAI_API_KEY)",
    "anthropic": "Anthropic Messages API: anthropic:MODEL (--base-url, key from ANTHROPIC_API_KEY)",
    "local": "embedded SmolLM2-135M-Instruct via llama-cpp-python ([local] extra): local[:GGUF]",
    "scripted": "scripted replies in order from a JSON file: scripted:replies.json",
    "function": "Python function called per request: function:package.module:callable",
    "none": "no model, for the methods that call none (`faultfinder methods` says which): none",
}
"""Help text of the built-in backends (the factories are listed in ``faultfinder.registry``;
plugins add theirs through the entry-point group ``faultfinder.backends``)."""

NO_MODEL = "none"
"""The spec of the stand-in used when no method of a command calls a model."""


class BackendFactory(Protocol):
    """What a backend kind registers: called with the part of ``--model KIND:NAME`` after
    the colon and the endpoint options the command line gave. ``api_key_env`` is passed
    only when the user named a variable (``--api-key-env``); otherwise the factory reads
    its own provider's variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``...), never
    another provider's. The backend it returns is named by the spec it was built from
    (``name == "KIND:NAME"``): results are labelled and keyed with that name."""

    def __call__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        **options: Any,
    ) -> Backend: ...


def require_name(
    name: str, kind: str, *, example: str, placeholder: str = "MODEL", what: str = "a model"
) -> str:
    """``name`` (the part of ``--model KIND:NAME`` after the colon), or a ``ConfigError``
    showing how to write the spec when it is empty. Factories whose kind needs a name call
    it (a plugin's may too), so the message reads the same for every backend."""
    if not name:
        raise ConfigError(f"Name {what}: --model {kind}:{placeholder} (e.g. {kind}:{example}).")
    return name


def make_backend(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    **options: Any,
) -> Backend:
    """Build the backend a spec names. Unknown kinds list the known ones.

    ``api_key_env`` reaches the factory only when given (the user's ``--api-key-env``):
    without it each backend reads its own provider's variable, so no key goes to another
    provider than the one it is for. A plugin's factory that fails with anything but a
    faultfinder error (a RuntimeError 'key not set'), or that names its backend otherwise
    than ``spec``, is a one-line ConfigError naming the plugin and its package."""
    from faultfinder.registry import BACKENDS as FACTORIES
    from faultfinder.registry import BUILTIN

    kind, _, rest = spec.partition(":")
    entry = FACTORIES.entry(kind)
    if entry is None:
        if not rest:
            import difflib

            kinds = FACTORIES.available()
            close = difflib.get_close_matches(spec.strip().lower(), kinds, n=1, cutoff=0.6)
            # 'lcoal' is a typo of a kind, not a model name for openai:.
            lead = f"Did you mean '{close[0]}'? Otherwise write" if close else "Write"
            raise ConfigError(
                f"Unknown model '{spec}'. {lead} KIND:NAME, e.g. openai:{spec}. "
                f"Kinds: {', '.join(kinds)}."
            )
        raise UnknownNameError("model backend", kind, FACTORIES.available())
    factory: BackendFactory = FACTORIES.get(kind)
    if api_key_env:
        options["api_key_env"] = api_key_env
    try:
        backend = factory(rest, base_url=base_url, api_key=api_key, **options)
    except FaultfinderError:
        raise
    except Exception as exc:
        error = FACTORIES.failure(kind, f"building --model {spec}", exc)
        if error is None:
            raise
        from faultfinder.redact import Redactor

        # The factory may have read a key: none goes out in the message, neither a
        # key-shaped token nor the value of a secret-named variable.
        redactor = Redactor([api_key, os.environ.get(api_key_env) if api_key_env else None])
        redactor.learn_env(os.environ)
        raise ConfigError(redactor.text(str(error))) from None
    problem = backend_problem(backend) if entry.origin != BUILTIN else None
    if problem is not None:
        raise ConfigError(
            f"The model backend '{kind}' from {entry.origin} ({entry.target}) built for "
            f"--model {spec} an object that {problem}. Fix or remove that package."
        )
    named = getattr(backend, "name", None)
    if entry.origin != BUILTIN and named != spec:
        raise ConfigError(
            f"The model backend '{kind}' from {entry.origin} ({entry.target}) calls the "
            f"backend it built for --model {spec} {named!r}: a backend's name must be its "
            "--model spec, which results are labelled and keyed with (else two models of "
            "one kind share their rows). Fix or remove that package."
        )
    return backend


def openai_backend(
    name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    **options: Any,
) -> Backend:
    """``openai:MODEL``: any OpenAI-compatible endpoint. The key comes from ``api_key``,
    else the variable ``api_key_env`` names, else ``OPENAI_API_KEY``."""
    from faultfinder.llm.openai_compat import OpenAICompatBackend

    require_name(name, "openai", example="gpt-4o")
    variable = api_key_env or OpenAICompatBackend.key_env
    key = api_key if api_key is not None else os.environ.get(variable)
    return OpenAICompatBackend(model=name, base_url=base_url, api_key=key, **options)


def local_backend(name: str, **options: Any) -> Backend:
    """``local[:GGUF]``: the embedded model (the ``[local]`` extra)."""
    from faultfinder.llm.local import LocalBackend

    options = {k: v for k, v in options.items() if k not in _ENDPOINT_OPTIONS}
    return LocalBackend(model_path=name or None, **options)


def scripted_backend(name: str, **options: Any) -> Backend:
    """``scripted:replies.json``: replies in order (a test double)."""
    from faultfinder.llm.doubles import ScriptedBackend

    require_name(
        name, "scripted", example="replies.json", placeholder="FILE", what="a replies file"
    )
    return ScriptedBackend.from_file(name)


def function_backend(name: str, **options: Any) -> Backend:
    """``function:module:callable``: a Python function answers (a test double)."""
    from faultfinder.llm.doubles import FunctionBackend

    return FunctionBackend(load_function(name), model=name)


def no_backend(name: str, **options: Any) -> Backend:
    """``none``: for commands whose methods call no model."""
    from faultfinder.llm.doubles import NoModelBackend

    return NoModelBackend()


_ENDPOINT_OPTIONS = ("base_url", "api_key", "api_key_env")


def load_function(ref: str) -> Callable[..., Any]:
    """The callable ``module:attr`` names, importing the module from the working directory
    first (as ``python -m`` would), then from installed packages. Every failure is one line.
    """
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--model function:{ref}: write function:package.module:callable")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise ConfigError(
            f"--model function:{ref}: no module named '{missing}' (looked in the working "
            f"directory {cwd} and in installed packages)"
        ) from None
    except Exception as exc:  # the user's module failed while importing
        raise ConfigError(
            f"--model function:{ref}: importing '{module_name}' failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError(f"--model function:{ref}: module '{module_name}' has no '{attr}'")
    if not callable(fn):
        raise ConfigError(
            f"--model function:{ref}: '{attr}' in '{module_name}' is not callable "
            f"(it is a {type(fn).__name__})"
        )
    return cast("Callable[..., Any]", fn)
