"""Options shared by commands that call a model or run a method."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

import click
from click.core import ParameterSource

from faultfinder import exitcodes
from faultfinder.cli.handling import BudgetError as BudgetError  # re-exported: the
from faultfinder.cli.handling import EndpointError as EndpointError  # commands import
from faultfinder.cli.handling import InputPath
from faultfinder.cli.handling import pass_errors as pass_errors  # them from here
from faultfinder.errors import ConfigError
from faultfinder.llm import json_text
from faultfinder.llm.client import DEFAULT_TIMEOUT, LLM
from faultfinder.llm.registry import BACKENDS, NO_MODEL
from faultfinder.llm.spec import LLMSpec
from faultfinder.loopback import URL_FORM, url_problem
from faultfinder.usage import Budget

DEFAULT_CACHE = Path(".faultfinder") / "cache.sqlite"
CACHE_ENV = "FAULTFINDER_CACHE"
"""Names the response cache file when --cache is not given (the test suite keeps its
entries out of the working tree with it)."""

# Types of numeric options: an out-of-range value is a one-line usage error (exit 2).
COUNT = click.IntRange(min=1)
"""A positive count (concurrency, repeats, budgets, candidates)."""
STEP = click.IntRange(min=0)
"""A 0-based step index."""
PORT = click.IntRange(min=0, max=65535)
"""A TCP port; 0 picks a free one."""
SECONDS = click.FloatRange(min=0, min_open=True)
"""A positive duration in seconds."""
TEMPERATURE = click.FloatRange(min=0, max=2)
"""A sampling temperature (the OpenAI API accepts 0..2)."""


class URLType(click.types.StringParamType):
    """An endpoint URL: one that is not an http(s) URL with a host ('http://[::1', a port
    out of range) is a usage error at once (exit 2, the option named, the URL not
    repeated: it may hold a key), not a failure of the first request."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        # Blanks around a URL are never part of it (a value pasted from a .env file): the
        # URL used is the one checked. An empty value names no URL: it stays what it was
        # before this check (--base-url '' is the backend's default endpoint; a command
        # needing a URL says so).
        text = super().convert(value, param, ctx).strip()
        if text and (problem := url_problem(text)):
            self.fail(f"{problem}; give {URL_FORM}", param, ctx)
        return text


URL = URLType()
"""The type of every option naming a URL (--base-url, --upstream, --url, ...)."""
CONTEXT_BUDGET = click.IntRange(min=256)
"""A prompt-token budget per call."""
SEED = click.IntRange(min=0)
"""Max prompt tokens per call (the smallest budget a prompt can be fitted into)."""


F = TypeVar("F", bound=Callable[..., Any])


class LazyHelpOption(click.Option):
    """An option whose help text is made only when a ``--help`` shows it
    (``help_text=callable``): a text listing plugins then costs nothing to commands that
    run, nor to their import."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._help_text = help_text

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._help_text()
        return super().get_help_record(ctx)


def model_help() -> str:
    """--model's help: the built-in backend kinds, then those installed plugins declare
    (read from their entry points' names; no plugin is imported)."""
    from faultfinder.registry import BACKENDS as FACTORIES
    from faultfinder.registry import BUILTIN

    texts = {
        **BACKENDS,
        NO_MODEL: "no model, for the methods that call none "
        f"({_no_model_methods(plugins=False)}; `faultfinder methods` names plugins'): none",
    }
    kinds = [f"{kind}: {text}" for kind, text in texts.items()]
    kinds += [
        f"{kind}: {kind}:MODEL ({entry.origin})"
        for kind, entry in FACTORIES.entries().items()
        if entry.origin != BUILTIN and kind not in BACKENDS
    ]
    return "Model spec. " + "; ".join(kinds)


@overload
def model_options(
    fn: F, *, timeout_flag: str = "--timeout", default_shown: bool | str = True
) -> F: ...
@overload
def model_options(
    fn: None = None, *, timeout_flag: str = "--timeout", default_shown: bool | str = True
) -> Callable[[F], F]: ...
def model_options(
    fn: Callable[..., Any] | None = None,
    *,
    timeout_flag: str = "--timeout",
    default_shown: bool | str = True,
) -> Any:
    """--model and the LLM layer's knobs. ``@model_options`` or, for a command whose own
    ``--timeout`` means something else, ``@model_options(timeout_flag="--call-timeout")``.
    ``default_shown``: what ``--help`` says the default of --model is (a command that uses
    a model only when --model is given says so instead of 'local')."""
    if fn is None:
        return functools.partial(
            model_options, timeout_flag=timeout_flag, default_shown=default_shown
        )
    options = [
        click.option(
            "--model",
            "model",
            default="local",
            show_default=default_shown,
            cls=LazyHelpOption,
            help_text=model_help,
        ),
        click.option(
            "--base-url",
            default=None,
            type=URL,
            help="Endpoint URL: the /v1 root of an OpenAI-compatible server (openai:), or "
            "the root of an Anthropic Messages API server (anthropic:).",
        ),
        click.option(
            "--api-key-env",
            default=None,
            metavar="VAR",
            help="Environment variable holding the API key (never stored or cached); "
            "default: the backend's own, OPENAI_API_KEY for openai:, ANTHROPIC_API_KEY for "
            "anthropic:, a plugin's documented one. Given to the backend only when named.",
        ),
        click.option(
            "--cache",
            "cache_path",
            default=str(DEFAULT_CACHE),
            show_default=True,
            envvar=CACHE_ENV,
            help=f"Response cache file; 'none' disables caching. ${CACHE_ENV} replaces "
            "the default.",
        ),
        click.option(
            "--concurrency",
            type=COUNT,
            default=8,
            show_default=True,
            help="Parallel model calls.",
        ),
        click.option(
            "--max-tokens",
            "max_tokens",
            type=COUNT,
            default=None,
            help="Stop the run before it spends more than this many tokens in all (see "
            "--budget-tokens for a budget per case).",
        ),
        click.option(
            "--max-calls",
            "max_calls",
            type=COUNT,
            default=None,
            help="Stop before making more than this many model calls.",
        ),
        click.option(
            "--rate-limit",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="At most this many requests per second to the endpoint (shared by every "
            "worker with --executor ray).",
        ),
        click.option(
            timeout_flag,
            "call_timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=DEFAULT_TIMEOUT,
            show_default=True,
            help="Seconds one model call may take in all, retries included; a reply "
            "trickling in slower is cut and recorded as an error.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


EMBEDDED = "local"
"""The model spec of the embedded SmolLM2-135M-Instruct (``local:GGUF`` names another)."""
EMBEDDED_NOTE = (
    "note: --model local is the embedded SmolLM2-135M: it shows that the pipeline runs end "
    "to end, but it is far too small to judge a failure, so its answers are not "
    "attributions. For a real one pass --model openai:MODEL or anthropic:MODEL (any "
    "compatible endpoint with --base-url), or run --method shortlist, which needs no model."
)


def llm_spec(
    model: str,
    base_url: str | None,
    api_key_env: str | None,
    cache_path: str,
    concurrency: int,
    max_tokens: int | None,
    max_calls: int | None,
    rate_limit: float | None = None,
    call_timeout: float = DEFAULT_TIMEOUT,
    needs_model: bool = True,
    judging: bool = True,
    needed_by: str | None = None,
) -> LLMSpec:
    """The LLM the model options describe, as data (no key in it). With
    ``needs_model=False`` (every method to run calls no model) the model is ``none``, a
    stand-in that refuses requests, so no model has to be installed or named. A judge on
    the embedded model (``judging``, model ``local``) gets :data:`EMBEDDED_NOTE` on stderr.
    ``needed_by`` names what calls the model (``method 'all-at-once'``): given, ``--model
    none`` is refused before anything runs, as no case of it could get an answer."""
    if needs_model and needed_by is not None and model.strip().lower() == NO_MODEL:
        raise ConfigError(no_model_refusal(needed_by))
    if not needs_model:
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.get_parameter_source("model") == ParameterSource.COMMANDLINE:
            click.echo(f"note: no model is called, so --model {model} is not used", err=True)
        model, cache_path = NO_MODEL, "none"
    elif judging and model == EMBEDDED:
        click.echo(EMBEDDED_NOTE, err=True)
    return LLMSpec(
        model=model,
        base_url=base_url,
        api_key_env=api_key_env,
        cache_path=None if cache_path.lower() == "none" else cache_path,
        concurrency=concurrency,
        budget=Budget(max_tokens=max_tokens, max_calls=max_calls),
        rate_limit=rate_limit,
        timeout=call_timeout,
    )


def no_model_refusal(needed_by: str) -> str:
    """Why ``--model none`` cannot serve ``needed_by``, and what to pass instead."""
    return (
        f"--model none calls no model, but {needed_by} needs one: pass --model "
        "openai:MODEL or anthropic:MODEL (any compatible endpoint with --base-url), or "
        "--model local (the embedded model, [local] extra); or run a method that needs no "
        f"model: {_no_model_methods()}."
    )


def _no_model_methods(plugins: bool = True) -> str:
    """The methods that call no model ('baseline, random, shortlist'), from the classes'
    ``needs_model`` (their shipped cards: no built-in is imported; a plugin's class is)."""
    from faultfinder.cli.methods_cmd import methods_without_model

    return ", ".join(methods_without_model(plugins))


def build_llm(**options: Any) -> LLM:
    """The LLM the model options describe."""
    return llm_spec(**options).build()


SAMPLING_OPTIONS = ("temperature", "top_p", "seed", "max_output_tokens")
"""Sampling options of every method that have their own command-line flags (also
settable with --set)."""
METHOD_FLAGS = (*SAMPLING_OPTIONS, "budget_tokens")
"""Every method option with its own command-line flag (``pop_sampling`` takes them)."""

budget_tokens_option = click.option(
    "--budget-tokens",
    "budget_tokens",
    type=COUNT,
    default=None,
    help="Token budget per case (prompt + reply of every model call of one trace); a case "
    "that would exceed it is recorded 'budget-exceeded' and the others go on (exit 5). "
    "compose fits its judge into it. Recorded in each result's config.",
)
"""``--budget-tokens`` (the method option ``budget_tokens``), for commands that run cases."""


def sampling_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--temperature, --top-p, --seed and --max-output-tokens (each method's own default
    when not given; see docs/methods/)."""
    options = [
        click.option(
            "--temperature",
            type=click.FloatRange(0.0, 2.0),
            default=None,
            help="Sampling temperature of every call (default: the method's own).",
        ),
        click.option(
            "--top-p",
            "top_p",
            type=click.FloatRange(0.0, 1.0, min_open=True),
            default=None,
            help="Nucleus-sampling mass of every call (default: the method's own).",
        ),
        click.option(
            "--seed",
            type=SEED,
            default=None,
            help="Sampling seed sent with every call (backends that take one).",
        ),
        click.option(
            "--max-output-tokens",
            "max_output_tokens",
            type=click.IntRange(min=16),
            default=None,
            help="Upper bound on every reply (default: each question's own bound).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def pop_sampling(options: dict[str, Any]) -> dict[str, Any]:
    """Remove the method flags (sampling, --budget-tokens) from a command's keyword
    arguments; return those given."""
    given = {key: options.pop(key, None) for key in METHOD_FLAGS}
    return {key: value for key, value in given.items() if value is not None}


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--executor and --ray-address (docs/scale.md)."""
    options = [
        click.option(
            "--executor",
            type=click.Choice(["local", "ray"]),
            default="local",
            show_default=True,
            help="Where the work runs: this process, or a Ray cluster (extra [ray]).",
        ),
        click.option(
            "--ray-address",
            default=None,
            help="With --executor ray: the cluster to join ('auto', ray://HOST:10001, "
            "HOST:PORT); default: start a local one.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


set_option = click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Method option (JSON values allowed), e.g. --set step_indices=false.",
)
"""``--set KEY=VALUE`` (repeatable): the method's options (``parse_settings``)."""


def method_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options every method honours (sampling included), plus free-form --set key=value."""
    fn = sampling_options(fn)
    options = [
        click.option(
            "--progress/--no-progress",
            "progress",
            default=None,
            help="Report each model call on stderr as it finishes (default: when stderr is a "
            "terminal).",
        ),
        click.option("--with-ground-truth", is_flag=True, help="Show the reference answer."),
        click.option(
            "--observability",
            type=click.Choice(["full", "no-metadata", "no-inputs", "outputs"]),
            default=None,
            help="What of the trace methods may see (default: outputs, for every method).",
        ),
        set_option,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_settings(settings: tuple[str, ...]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as method options (a value is JSON when it parses)."""
    overrides: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'", param_hint="--set")
        try:
            overrides[key.strip()] = json_text.loads(value)
        except json_text.JSONTextError:
            overrides[key.strip()] = value
    return overrides


def method_overrides(
    with_ground_truth: bool, observability: str | None, settings: tuple[str, ...]
) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if with_ground_truth:
        overrides["with_ground_truth"] = True
    if observability:
        overrides["observability"] = observability
    return overrides | parse_settings(settings)


def exit_for(counts: exitcodes.CaseCounts, noun: str = "case") -> None:
    """End the command with the exit code the counts call for; the counts go to stderr."""
    if counts.exit_code != exitcodes.OK:
        click.echo(counts.message(noun), err=True)
        click.get_current_context().exit(counts.exit_code)


strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Treat keys a trace reader does not know as errors, not warnings.",
)
"""``--strict`` for commands that read traces (import, attribute, eval)."""


def _step_set_level(ctx: click.Context, param: click.Parameter, value: str) -> float | None:
    return None if value == "off" else float(value)


step_set_option = click.option(
    "--step-set",
    "step_set",
    type=click.Choice(["0.8", "0.9", "0.95", "off"]),
    default="0.9",
    show_default=True,
    callback=_step_set_level,
    help="Coverage level of the result's step set: the steps that hold the decisive step "
    "with this probability (the offline shortlist's conformal set plus the method's own "
    "step; no model call). 'off': no set.",
)
"""``--step-set`` for commands that run methods (attribute, eval); the value is a float or
None."""


def _absolute(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else str(Path(value).resolve())


shortlist_weights_option = click.option(
    "--shortlist-weights",
    "shortlist_weights",
    type=InputPath(dir_okay=False),
    default=None,
    envvar="FAULTFINDER_SHORTLIST_WEIGHTS",
    callback=_absolute,
    metavar="FILE",
    help="Shortlist weights for the step sets and for the methods that rank with them "
    "(shortlist, compose); default: the shipped ones. `faultfinder calibrate` writes a "
    "file calibrated on your own labelled traces.",
)
"""``--shortlist-weights`` for commands that run methods (attribute, eval): an absolute
path, so a worker in another directory finds the same file."""


def read_weights(path: str | Path | None) -> None:
    """Read the weights file ``path`` now (None: the shipped one, nothing to check), so a
    bad one is said once, before any model call, and a file of another kind (a trace,
    eval results) is named as what it is, not as a weights file with a missing field."""
    if path is None:
        return
    from faultfinder.cli.kinds import explained
    from faultfinder.shortlist.weights import load_weights

    with explained(path, "weights", "a shortlist weights file"):
        load_weights(path)
