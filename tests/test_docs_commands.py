"""Every `faultfinder <command> --option` written in README.md or docs/ names a command and
options that the CLI has now, spelled as its --help spells them.

Users copy these lines. A renamed or removed option breaks them silently unless something
reads the docs: this test does, from fenced code blocks and from inline code spans that
start with `faultfinder `. It asks each command's --help through click's CliRunner (no
process, no network) and fails with the file, line and option of every mismatch.
"""

from __future__ import annotations

import importlib
import re
import shlex
from functools import cache
from pathlib import Path
from typing import NamedTuple

import click
import pytest
from click.testing import CliRunner

from faultfinder.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Words that may stand right before `faultfinder` when it starts a command (`--`: the
# command `kubectl exec POD --` runs).
_LEADERS = {"$", "&&", "||", ";", "|", "(", "run", "-m", "exec", "time", "xargs", "!", "--"}
# Tokens that end the command line `faultfinder` started (shell operators, redirections).
_ENDERS = {"&&", "||", ";", "|", "&", ">", ">>", "2>", "2>&1", "<", ")"}
_OPTION = re.compile(r"^[\[(]*(--?[A-Za-z][\w-]*)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`(faultfinder [^`]+)`")
# Methods the docs define as examples (docs/plugins.md writes this plugin); `METHOD`,
# `M` and other upper-case words are placeholders.
_EXAMPLE_METHODS = {"one-question"}
_PLACEHOLDER = re.compile(r"<[^<>\s]+>")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")


class Usage(NamedTuple):
    """One documented `faultfinder` command line."""

    where: str
    """file:line, for the failure message."""
    command: str
    """The subcommand, or "" for `faultfinder` alone."""
    options: tuple[str, ...]
    """The options written on it, as typed (`--x=1` is `--x`)."""
    methods: tuple[str, ...] = ()
    """The value of `--method`, split at commas, presets dropped (`echo:I1` is `echo`)."""
    sets: tuple[str, ...] = ()
    """The KEY of every `--set KEY=VALUE`."""


def _tokens(text: str) -> list[str]:
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:  # unbalanced quotes in an elided example: fall back to words
        return text.split()


def usages_in(text: str, name: str) -> list[Usage]:
    """The `faultfinder` command lines of one markdown text: every line of a fenced block
    (a trailing backslash joins the next line) and every inline code span starting with
    `faultfinder `."""
    found: list[Usage] = []
    lines = text.splitlines()
    in_fence = False
    pending = ""
    pending_line = 0
    for number, line in enumerate(lines, start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            pending = ""
            continue
        if in_fence:
            if not pending:
                pending_line = number
            stripped = line.rstrip()
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            found += _usages(pending + stripped, f"{name}:{pending_line}")
            pending = ""
        else:
            for span in _INLINE.findall(line):
                found += _usages(span, f"{name}:{number}")
    return found


def _usages(command_line: str, where: str) -> list[Usage]:
    # Placeholders (`runs/<run>/trace.json`) are words, not redirections, and a `|` inside
    # `[...]` of a synopsis (`[--upstream URL | --trust-run]`) separates alternatives.
    command_line = _PLACEHOLDER.sub("X", command_line)
    command_line = _BRACKETS.sub(lambda m: m.group(0).replace("|", " "), command_line)
    tokens = _tokens(command_line)
    found = []
    for i, token in enumerate(tokens):
        if token != "faultfinder":
            continue
        before = tokens[i - 1] if i else None
        if before is not None and before not in _LEADERS and "=" not in before:
            continue  # `pip install faultfinder`, prose, a path
        rest: list[str] = []
        for t in tokens[i + 1 :]:
            if t in _ENDERS or t == "--":  # after `--` the words belong to the wrapped program
                break
            rest.append(t)
        command = ""
        if rest and not rest[0].startswith("-"):
            command = rest.pop(0)
        options, methods, sets = [], [], []
        for n, t in enumerate(rest):
            m = _OPTION.match(t)
            if not m:
                continue
            options.append(m.group(1))
            value = t.split("=", 1)[1] if "=" in t else (rest[n + 1] if n + 1 < len(rest) else "")
            if m.group(1) == "--method" and re.fullmatch(r"[\w:+,.-]+", value):
                names = [spec.split(":", 1)[0] for spec in value.split(",")]
                methods += [x for x in names if not x.isupper() and x not in _EXAMPLE_METHODS]
            elif m.group(1) == "--set" and "=" in value:
                sets.append(value.split("=", 1)[0])
        found.append(Usage(where, command, tuple(options), tuple(methods), tuple(sets)))
    return found


def all_usages() -> list[Usage]:
    usages = []
    for path in DOCS:
        usages += usages_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return usages


@cache
def help_text(command: str) -> str:
    args = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(main, args, prog_name="faultfinder")
    assert result.exit_code == 0, (command, result.output)
    return result.output


@cache
def option_names(command: str) -> frozenset[str]:
    """Every option spelling of COMMAND (both sides of a `--x/--no-x` flag), plus --help."""
    if not command:
        cmd: click.Command = main
    else:
        entry = next(c for c in COMMANDS if c.name == command)
        cmd = getattr(importlib.import_module(entry.module), entry.attr)
    names = {"--help"}
    for param in cmd.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return frozenset(names)


@cache
def method_options(method: str) -> frozenset[str] | None:
    """The `--set` keys of METHOD as `faultfinder methods METHOD` lists them (None: no such
    method)."""
    result = CliRunner().invoke(main, ["methods", method], prog_name="faultfinder")
    if result.exit_code != 0:
        return None
    return frozenset(re.findall(r"^  (\w+)  \(", result.output, re.M))


def problems(usages: list[Usage]) -> list[str]:
    known = {c.name for c in COMMANDS}
    out = []
    for usage in usages:
        for method in usage.methods:
            if method_options(method) is None:
                out.append(f"{usage.where}: `--method {method}` is not a method")
        keys = set().union(*(method_options(m) or () for m in usage.methods))
        for key in usage.sets:
            if usage.methods and keys and key not in keys:
                out.append(
                    f"{usage.where}: `--set {key}=` is an option of none of "
                    f"{', '.join(usage.methods)} (`faultfinder methods NAME`)"
                )
        if usage.command and usage.command not in known:
            out.append(f"{usage.where}: `faultfinder {usage.command}` is not a command")
            continue
        shown = help_text(usage.command)
        for option in usage.options:
            if option not in option_names(usage.command):
                out.append(f"{usage.where}: `faultfinder {usage.command}` has no option {option}")
            elif not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", shown):
                out.append(f"{usage.where}: {option} is missing from `{usage.command} --help`")
    return out


def test_the_docs_show_commands() -> None:
    # The extractor finds the documented lines at all (a parser that found nothing would
    # pass everything below).
    usages = all_usages()
    assert len(usages) > 100
    assert {u.command for u in usages} >= {"attribute", "import", "eval", "ui", "replay"}
    assert sum(len(u.sets) for u in usages) > 5
    # ... and `faultfinder methods NAME` still prints options the way method_options reads.
    assert {"panel_size", "roles", "seed"} <= (method_options("echo") or set())


def test_every_documented_option_exists() -> None:
    found = problems(all_usages())
    assert not found, "\n".join(found)


def test_a_missing_option_or_command_fails() -> None:
    doc = (
        "Run it:\n\n"
        "```bash\n"
        "faultfinder attribute trace.json --method all-at-once \\\n"
        "    --no-such-option 3 && faultfinder nosuchcommand x\n"
        "pip install faultfinder  # not a command line\n"
        "faultfinder record --out runs -- python team.py --not-ours\n"
        "faultfinder replay runs/<run> --at 1 [--upstream URL | --no-such-alt]\n"
        "faultfinder eval d --method echo:I1,nomethod --set panel_size=6 --set no_key=1\n"
        "faultfinder attribute t.json --method METHOD --set anything=1\n"
        "```\n\n"
        "or `faultfinder eval --bogus-flag` inline.\n"
    )
    usages = usages_in(doc, "t.md")
    assert [(u.where, u.command) for u in usages] == [
        ("t.md:4", "attribute"),
        ("t.md:4", "nosuchcommand"),
        ("t.md:7", "record"),
        ("t.md:8", "replay"),
        ("t.md:9", "eval"),
        ("t.md:10", "attribute"),
        ("t.md:13", "eval"),
    ]
    assert usages[0].options == ("--method", "--no-such-option")
    assert "--not-ours" not in usages[2].options
    assert problems(usages) == [
        "t.md:4: `faultfinder attribute` has no option --no-such-option",
        "t.md:4: `faultfinder nosuchcommand` is not a command",
        "t.md:8: `faultfinder replay` has no option --no-such-alt",
        "t.md:9: `--method nomethod` is not a method",
        "t.md:9: `--set no_key=` is an option of none of echo, nomethod"
        " (`faultfinder methods NAME`)",
        "t.md:13: `faultfinder eval` has no option --bogus-flag",
    ]


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_every_command_has_help(command: str) -> None:
    assert help_text(command).startswith("Usage: faultfinder " + command)
