"""`faultfinder methods`: the attribution methods, their presets and options.

Kept apart from `attribute` so that listing methods imports the registry and the method
classes, not the LLM client, a trace loader or a replay proxy (tests/test_startup.py)."""

from __future__ import annotations

import json
import textwrap
from typing import Any, Literal, get_args, get_origin

import click

from faultfinder.cli.handling import pass_errors
from faultfinder.registry import BUILTIN, METHODS, method_class, methods


@click.command("methods")
@click.argument("name", required=False)
@pass_errors
def list_methods(name: str | None) -> None:
    """List attribution methods and their presets; with NAME, that method's options."""
    if name:
        click.echo(describe_method(name))
        return
    for method_name, cls in methods().items():
        presets = f"  [presets: {', '.join(cls.presets)}]" if cls.presets else ""
        origin = METHODS.origin(method_name)
        source = "" if origin == BUILTIN else f"  ({origin})"
        click.echo(f"{method_name:<16} {cls.summary}{presets}{source}")


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _type_name(annotation: Any) -> str:
    """'bool', 'int | None', or the choices of a Literal: 'a|b|c'."""
    if get_origin(annotation) is Literal:
        return "|".join(str(a) for a in get_args(annotation))
    name = getattr(annotation, "__name__", None)
    return name if name else str(annotation).replace("typing.", "")


def describe_method(spec: str) -> str:
    """A method's summary, whether it needs a model, its presets, and every option (--set
    KEY=VALUE) with its type, default and documentation (the field docstrings)."""
    name, _, _ = spec.partition(":")
    cls = method_class(name)
    lines = [f"{name}: {cls.summary}", f"from:    {METHODS.origin(name)}"]
    lines.append("model:   " + ("needed (--model)" if cls.needs_model else "none (no --model)"))
    if cls.presets:
        lines.append("presets (use as NAME:PRESET):")
        for preset, settings in cls.presets.items():
            shown = ", ".join(f"{k}={_show(v)}" for k, v in settings.items()) or "(defaults)"
            lines.append(f"  {name}:{preset:<14} {shown}")
    lines.append("options (--set KEY=VALUE, JSON values allowed):")
    for field, info in cls.Config.model_fields.items():
        default = info.get_default(call_default_factory=True)
        lines.append(f"  {field}  ({_type_name(info.annotation)}, default {_show(default)})")
        doc = " ".join((info.description or "").split())
        lines.extend("      " + line for line in textwrap.wrap(doc, 84))
    return "\n".join(lines)
