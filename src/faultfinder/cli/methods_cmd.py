"""`faultfinder methods`: the attribution methods, their presets and options.

Listing the methods imports none of them: the built-ins' one-line cards (summary, presets)
are read from ``methods/cards.json``, which tests/test_startup.py keeps equal to the
classes (regenerate it with ``python -m faultfinder.cli.methods_cmd``). A method without a
card (a plugin, a built-in added since) is imported to read its class, as before. So
`faultfinder methods` starts without pydantic or the method interface; `faultfinder
methods NAME` imports that one method to show its options."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import click

from faultfinder.cli.handling import pass_errors
from faultfinder.errors import ConfigError
from faultfinder.registry import BUILTIN, METHODS, PluginWarning, method_class

CARDS = "methods/cards.json"
"""The built-in methods' cards, inside the package."""


def card_of(cls: Any) -> dict[str, Any]:
    """What `faultfinder methods` shows of a method class: its summary, preset names and
    whether it calls a model."""
    return {
        "summary": str(cls.summary),
        "presets": list(cls.presets),
        "needs_model": bool(getattr(cls, "needs_model", True)),
    }


def read_cards() -> dict[str, dict[str, Any]]:
    """The shipped cards by method name, each with the ``target`` it describes."""
    try:
        text = resources.files("faultfinder").joinpath(CARDS).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return {}
    cards: dict[str, dict[str, Any]] = json.loads(text)
    return cards


def cards(plugins: bool = True) -> dict[str, dict[str, Any]]:
    """Every method's card by name, in name order: the shipped card of a built-in whose
    target it names, else the class's own (imported; a plugin that does not import is
    skipped with a warning, as everywhere). Without ``plugins``, the methods no package
    declares only (nothing a plugin ships is imported)."""
    shipped = read_cards()
    found: dict[str, dict[str, Any]] = {}
    for name, entry in sorted(METHODS.entries().items()):
        if not plugins and entry.origin.startswith("plugin"):  # what a package declares
            continue
        card = shipped.get(name)
        if entry.origin == BUILTIN and card is not None and card.get("target") == entry.target:
            found[name] = card
            continue
        try:
            found[name] = card_of(METHODS.get(name))
        except ConfigError as exc:
            if entry.origin == BUILTIN:
                raise
            warnings.warn(str(exc), PluginWarning, stacklevel=2)
    return found


def methods_without_model(plugins: bool = True) -> list[str]:
    """The methods whose class says it calls no model (``needs_model = False``), by name,
    read as `faultfinder methods` reads them: from the cards, importing no built-in; a
    plugin's class is imported, unless ``plugins`` is False (help text: built-ins only,
    so `--help` imports no plugin)."""
    found = cards(plugins)
    return [name for name, card in found.items() if not card.get("needs_model", True)]


def write_cards(path: Path) -> dict[str, dict[str, Any]]:
    """Regenerate the shipped cards from the built-in classes."""
    built_in = {n: e for n, e in METHODS.entries().items() if e.origin == BUILTIN}
    written = {
        name: {"target": entry.target, **card_of(method_class(name))}
        for name, entry in sorted(built_in.items())
    }
    path.write_text(json.dumps(written, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return written


@click.command("methods")
@click.argument("name", required=False)
@pass_errors
def list_methods(name: str | None) -> None:
    """List attribution methods and their presets; with NAME, that method's options."""
    if name:
        click.echo(describe_method(name))
        return
    for method_name, card in cards().items():
        presets = f"  [presets: {', '.join(card['presets'])}]" if card["presets"] else ""
        origin = METHODS.origin(method_name)
        source = "" if origin == BUILTIN else f"  ({origin})"
        click.echo(f"{method_name:<16} {card['summary']}{presets}{source}")


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


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / CARDS
    print(f"wrote {len(write_cards(target))} cards to {target}", file=sys.stderr)
