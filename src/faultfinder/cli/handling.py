"""How every command reports a faultfinder error or warning: one line, the documented exit
code (docs/exit-codes.md). A leaf of the CLI: it imports no model, trace or method code,
so commands that only list things start fast."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import click

from faultfinder import exitcodes
from faultfinder.errors import FaultfinderWarning
from faultfinder.shown import safe


class BudgetError(click.ClickException):
    """One-line error: the token or call budget ran out."""

    exit_code = exitcodes.BUDGET_EXCEEDED


class EndpointError(click.ClickException):
    """One-line error: the model endpoint kept failing."""

    exit_code = exitcodes.ERRORED


def pass_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Show FaultfinderError as a one-line message (no traceback) and exit with its code
    (a budget overrun 5, an endpoint that kept failing 4, anything else 1); show each
    FaultfinderWarning (unknown keys in a trace, a cache set aside) as one 'warning:' line
    on stderr."""
    from faultfinder.errors import (
        BudgetExceededError,
        EnvironmentValueError,
        FaultfinderError,
        LLMCallError,
    )

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with warning_lines():
            try:
                return fn(*args, **kwargs)
            except BudgetExceededError as exc:
                raise BudgetError(safe(str(exc))) from None
            except LLMCallError as exc:
                raise EndpointError(safe(str(exc))) from None
            except EnvironmentValueError as exc:
                # A variable standing in for an option: a bad command line, as the option.
                context = click.get_current_context(silent=True)
                raise click.UsageError(safe(str(exc)), context) from None
            except FaultfinderError as exc:
                # Its message may quote the trace (a field's value, an agent's name).
                raise click.ClickException(safe(str(exc))) from None

    return wrapper


@contextlib.contextmanager
def warning_lines() -> Iterator[None]:
    """Within it, each FaultfinderWarning is one 'warning:' line on stderr, every time it
    is raised (what a command does while it runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", FaultfinderWarning)
        warnings.showwarning = _show_warning
        yield


def show_warnings_as_lines() -> None:
    """Show FaultfinderWarnings as one 'warning:' line for the rest of the process, also
    where :func:`pass_errors` does not reach: while click parses the command line (an
    option's callback), renders a ``--help`` text, or imports a command's module. Other
    warnings are shown as Python shows them. Installed when this module is imported, that
    is by every command's module before the command parses anything; a repeated warning
    is shown once there (Python's default), a plugin's load failure is raised only once
    anyway (faultfinder.registry)."""
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    if issubclass(category, FaultfinderWarning):
        click.echo(safe(f"warning: {message}"), err=True)
    else:
        click.echo(warnings.formatwarning(message, category, filename, lineno, line), err=True)


class MissingInputError(click.ClickException):
    """One-line error: an input path does not exist (exit 1: a bad input, like an
    unreadable file; exit 2 is kept for a malformed command line)."""

    exit_code = exitcodes.FAILURE


class InputPath(click.Path):
    """``click.Path(exists=True)`` whose missing path is exit 1 with one line naming it
    (docs/exit-codes.md), not a usage error. The other checks (a file where a folder is
    expected...) stay click's."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("exists", None)
        super().__init__(exists=False, **kwargs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str | os.PathLike) and not os.path.lexists(value):
            name = param.human_readable_name if param is not None else "path"
            if isinstance(param, click.Option) and param.opts:  # as typed: --shortlist-weights
                name = max(param.opts, key=len)
            raise MissingInputError(f"{name}: {os.fspath(value)!r} does not exist.")
        return super().convert(value, param, ctx)


show_warnings_as_lines()


def program_argv(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """The program's argv (the arguments after ``--``), refusing one that starts with an
    option: the commands that run a program pass options they do not know through to it,
    so a mistyped one (``--upstreem URL``) became the program to run ("Cannot run
    '--upstreem'"). It is click's usage error instead, with a "did you mean"."""
    if value and value[0].startswith("-") and value[0] != "-":
        known = [o for p in ctx.command.params for o in p.opts if o.startswith("--")]
        raise click.NoSuchOption(value[0], possibilities=known, ctx=ctx)
    return value
