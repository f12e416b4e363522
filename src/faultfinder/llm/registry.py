"""Turn a model spec such as ``openai:gpt-4o`` or ``local`` into a backend."""

from __future__ import annotations

import importlib
import os
from typing import Any

from faultfinder.errors import ConfigError, UnknownNameError
from faultfinder.llm.base import Backend

BACKENDS: dict[str, str] = {
    "openai": "OpenAI-compatible endpoint: openai:MODEL (--base-url, key from --api-key-env)",
    "local": "embedded SmolLM2-135M-Instruct via llama-cpp-python ([local] extra): local[:GGUF]",
    "scripted": "scripted replies in order from a JSON file: scripted:replies.json",
    "function": "Python function called per request: function:package.module:callable",
}


def make_backend(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    **options: Any,
) -> Backend:
    """Build the backend a spec names. Unknown kinds list the known ones."""
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        from faultfinder.llm.openai_compat import OpenAICompatBackend

        if not rest:
            raise ConfigError("Name a model: --model openai:MODEL (e.g. openai:gpt-4o).")
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        return OpenAICompatBackend(model=rest, base_url=base_url, api_key=key, **options)
    if kind == "local":
        from faultfinder.llm.local import LocalBackend

        return LocalBackend(model_path=rest or None, **options)
    if kind == "scripted":
        from faultfinder.llm.doubles import ScriptedBackend

        if not rest:
            raise ConfigError("Name a replies file: --model scripted:replies.json")
        return ScriptedBackend.from_file(rest)
    if kind == "function":
        from faultfinder.llm.doubles import FunctionBackend

        module_name, _, attr = rest.partition(":")
        if not module_name or not attr:
            raise ConfigError("Use --model function:package.module:callable")
        fn = getattr(importlib.import_module(module_name), attr)
        return FunctionBackend(fn, model=rest)
    raise UnknownNameError("model backend", kind, list(BACKENDS))
