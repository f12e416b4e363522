"""The attribution-method protocol, its shared configuration and its result.

A method is a class with a pydantic ``Config`` and an async ``attribute(trace, llm)``
returning a :class:`Verdict`. :func:`run_method` wraps the call with usage tracking,
timing and provenance, producing the self-describing :class:`Attribution`.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from faultfinder.contracts import interface_problem
from faultfinder.errors import (
    BudgetExceededError,
    CaseBudgetExceededError,
    EndpointSetupError,
    FaultfinderError,
)
from faultfinder.judging.pairing import apply_step_rule
from faultfinder.judging.reference import GroundTruthStatus, ground_truth_status
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import CallRecord, track_usage
from faultfinder.redact import Redactor
from faultfinder.shortlist.sets import DEFAULT_LEVEL, weights_at
from faultfinder.shortlist.sets import step_set as step_set_of
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage

Observability = Literal["full", "no-metadata", "no-inputs", "outputs"]
"""What a method may see: 'full' (metadata + step inputs + outputs), 'no-metadata'
(no agent configurations / architecture notes), 'no-inputs' (no per-step input
context), 'outputs' (step outputs only: the Who&When setting)."""

logger = logging.getLogger("faultfinder")

NO_STEPS = (
    "the trace has no steps: there is nothing to attribute (docs/import.md says what "
    "becomes a step)"
)
"""The error of a case whose trace has no step. Not a verdict: "no error found" would tell
a script the run was checked. ``attribute`` refuses such a trace (exit 1); ``eval`` and
the UI's run button record it as an ``error`` row with this text."""

VerdictStatus = Literal["ok", "unparsed", "no-error-found", "error", "budget-exceeded"]


class ChatOptions(TypedDict):
    """The per-call settings a method passes to ``LLM.chat``."""

    temperature: float | None
    top_p: float | None
    seed: int | None
    max_tokens: int


class MethodConfig(BaseModel):
    """Options every method honours. Method configs subclass this.

    Each field is documented by the docstring under it; pydantic reads those into the
    field's description (``use_attribute_docstrings``), which ``faultfinder methods NAME``
    shows.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    PROMPT_VERSION: ClassVar[str] = "none"
    """Version of the method's prompts; bumped whenever they change ('none': no prompts)."""
    WITHOUT_PREFIX_CACHE: ClassVar[dict[str, Any]] = {}
    """Options that read fewer prompt tokens against an endpoint with no prefix cache (a
    layout built for the cache pays for it there); `report` suggests them when a run got
    no cached tokens."""

    with_ground_truth: bool = False
    """Show the task's reference answer to the judge (the paper's 'with ground truth'),
    looked up by ``judging.reference.reference_answer``. A trace without one runs as
    without it, with a warning and ``ground_truth: unavailable`` in the result."""
    observability: Observability = "outputs"
    """What of the trace the method may see; see ``Observability``. The same default for
    every method: 'outputs' (step outputs, speakers, task), the setting of the Who&When
    benchmark and of every method paper evaluated on it, so scores of different methods
    compare equal information. 'full' adds recorded inputs and agent configurations
    (TraceElephant's setting); see docs/eval.md."""
    context_budget: int | None = Field(default=None, ge=256)
    """Max prompt tokens per call (counted with the model's tokenizer where the backend has
    one). Logs over it are cut by ``judging.fitting.fit_steps``: never the steps under
    judgement, always with visible markers, never a prompt over the budget."""
    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature of every call; None sends none (the backend's default). The
    default 0 is a choice, not the papers' (which sample): repeats at 0 are not
    independent runs. Each method documents its default in docs/methods/."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus-sampling mass; None sends none (the backend's default, 1.0 for OpenAI)."""
    seed: int | None = None
    """Sampling seed sent with every call (backends that take one); a parse retry adds
    its attempt number. None: the backend's own (the embedded model's is 0)."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """Per-case token budget (``--budget-tokens``): the model calls of one case may spend
    at most this many tokens, prompt plus reply, cache hits included. The LLM layer
    reserves each call's worst case before sending it, so concurrent calls cannot
    overshoot; a case that would exceed it is 'budget-exceeded' and a batch goes on.
    Methods that plan (``compose``) fit their work into it. None: no per-case limit (the
    run-wide --max-tokens still applies)."""
    max_output_tokens: int | None = Field(default=None, ge=16)
    """Upper bound on every reply. None: each question's own bound, sized to what its
    answer fields need (documented per method in docs/methods/)."""

    def reply_tokens(self, needed: int) -> int:
        """The reply bound of a question whose answer needs ``needed`` tokens:
        ``max_output_tokens`` when set, else ``needed``."""
        return self.max_output_tokens if self.max_output_tokens is not None else needed

    def chat_options(self, needed: int) -> ChatOptions:
        """Sampling settings and the reply bound of one question (``needed``: the tokens
        its answer fields need), as keyword arguments of ``LLM.chat``."""
        return ChatOptions(
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            max_tokens=self.reply_tokens(needed),
        )

    def prompt_version(self) -> str:
        """The version of the prompts this configuration sends (recorded in every result).
        Methods whose prompts depend on options override it; the default is the method
        class's ``PROMPT_VERSION``."""
        return self.PROMPT_VERSION


class Verdict(BaseModel):
    """What a method concluded for one trace."""

    agent: str | None = None
    """Responsible agent (normalised name)."""
    step: int | None = None
    """Decisive error step, canonical 0-based."""
    reason: str | None = None
    """Why."""
    confidence: float | None = None
    """Method's confidence in [0, 1], when it has one."""
    status: VerdictStatus = "ok"
    """'unparsed' when the model's answer could not be read. What was readable is kept: a
    verdict whose step broke the agent/step rule (``judging/pairing.py``) keeps its agent,
    has step None and says why in ``details['step_unparsed']``."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Method-specific evidence (votes, candidates, search path...)."""


class Attribution(Verdict):
    """A verdict plus everything needed to interpret and reproduce it."""

    trace_id: str
    method: str
    config: dict[str, Any]
    model: str
    prompt_version: str
    with_ground_truth: bool
    ground_truth: GroundTruthStatus = "off"
    """'shown' (the reference answer was in the prompts), 'off' (not asked for), or
    'unavailable' (asked for, but the trace has none: the method ran without it)."""
    observability: str
    budget_stop: Literal["case", "run"] | None = None
    """With status 'budget-exceeded', which budget stopped the case: 'case' (its own
    ``budget_tokens``, in ``config``: the batch goes on) or 'run' (--max-tokens or
    --max-calls: no further case starts)."""
    usage: Usage = Field(default_factory=Usage)
    calls: list[CallRecord] = Field(default_factory=list)
    error: str | None = None
    step_set: list[int] | None = None
    """Steps that hold the decisive step with probability ``step_set_level``: the offline
    shortlist's split-conformal set plus this result's own step (``shortlist/sets.py``).
    None when step sets are off or the trace has no steps."""
    step_set_level: float | None = None
    """Target coverage of ``step_set`` (0.8, 0.9 or 0.95)."""
    step_set_source: str | None = None
    """The shortlist model that ranked the steps: 'shipped:fold-N' (a Who&When trace, by
    the model that neither trained nor calibrated on its fold) or 'shipped:deploy'."""
    step_set_shift: float | None = None
    """How unlike the calibration traces this trace is (``shortlist/shift.py``)."""
    step_set_calibrated: bool | None = None
    """False: the trace is unlike the calibration data (or the ranker trained on it), so
    ``step_set_level`` is not a coverage claim for this trace. None: no set."""
    step_set_shift_limit: float | None = None
    """The shift score up to which ``step_set_level`` is claimed for this trace (the
    weights' threshold for its source, else the pooled one); ``step_set_shift`` past it
    withdraws the claim. None: no set, or weights without a shift reference."""
    wall_time_s: float = 0.0
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())


@runtime_checkable
class Method(Protocol):
    """An attribution method: one module (or package) per method, listed in
    ``faultfinder.registry`` or declared by a plugin in the entry-point group
    ``faultfinder.methods``. Subclass :class:`MethodBase` for the defaults."""

    name: ClassVar[str]
    """Registry name, e.g. 'all-at-once'."""
    summary: ClassVar[str]
    """One line for ``faultfinder methods``."""
    Config: ClassVar[type[MethodConfig]]
    """The method's configuration class."""
    presets: ClassVar[dict[str, dict[str, Any]]]
    """Named configurations (ablations), selectable as 'name:preset'."""
    needs_model: ClassVar[bool]
    """Whether the method calls a model. False: commands build none (results say
    ``model: none``) and any call it makes fails loudly."""
    floor: ClassVar[bool]
    """A score the others must beat (``random``, ``baseline``): ``report`` lists it last
    and ``report --floors`` computes it."""
    pairs_agent_and_step: ClassVar[bool]
    """Whether the named agent must be the one who took the named step (the agent/step
    rule of ``judging/pairing.py``). False for methods whose agent and step are
    independent draws (the random floor): the range check only."""
    proposes_candidates: ClassVar[bool]
    """Whether the verdict's ``details['candidates']`` lists steps worth verifying
    (``compose``); the dynamic check replays those first."""

    def __init__(self, config: MethodConfig) -> None: ...

    @property
    def config(self) -> MethodConfig:
        """The configuration the method was built with."""
        ...

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        """Find the responsible agent and decisive step of a failed trace."""
        ...

    async def judge_candidates(
        self, trace: Trace, llm: LLM, candidates: list[int]
    ) -> Verdict | None:
        """Judge only these steps, when the method can (``compose`` asks its judge this);
        None when it cannot, and ``compose`` then lets it read the whole view."""
        ...

    def candidates_cost(self, trace: Trace, llm: LLM, candidates: list[int]) -> int | None:
        """The most tokens :meth:`judge_candidates` may reserve on these steps, when that
        is known before asking; None otherwise."""
        ...


class MethodBase:
    """Defaults for :class:`Method`: subclass it, set ``name``, ``summary`` and
    ``Config``, and write ``attribute``. Every capability is declared here with its
    default, so nothing is read with a fallback."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Config: ClassVar[type[MethodConfig]]
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    needs_model: ClassVar[bool] = True
    floor: ClassVar[bool] = False
    pairs_agent_and_step: ClassVar[bool] = True
    proposes_candidates: ClassVar[bool] = False
    config: MethodConfig

    def __init__(self, config: MethodConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        raise NotImplementedError

    async def judge_candidates(
        self, trace: Trace, llm: LLM, candidates: list[int]
    ) -> Verdict | None:
        return None

    def candidates_cost(self, trace: Trace, llm: LLM, candidates: list[int]) -> int | None:
        return None


_METHOD_FLAGS = ("needs_model", "floor", "pairs_agent_and_step", "proposes_candidates")
_METHOD_CALLS = ("attribute", "judge_candidates", "candidates_cost")


def method_problem(cls: object) -> str | None:
    """What keeps ``cls`` from being a method class (:class:`Method`), as a phrase ('is
    not a method: it lacks summary, Config'), or None. The registry asks it of every method
    it loads, so a plugin that is not one is refused there, in one line naming it, and no
    command half-uses it."""
    config = getattr(cls, "Config", None)
    presets = getattr(cls, "presets", None)
    wrong = []
    if not (isinstance(config, type) and issubclass(config, MethodConfig)):
        wrong.append(("Config", "Config is not a MethodConfig subclass"))
    if not (
        isinstance(presets, dict)
        and all(isinstance(k, str) and isinstance(v, dict) for k, v in presets.items())
    ):
        wrong.append(("presets", "presets is not a dict of option dicts by name"))
    return interface_problem(
        cls,
        "method",
        "a method class follows faultfinder.judging.method.Method: subclass MethodBase",
        texts=("name", "summary"),
        others=("Config", "presets"),
        flags=_METHOD_FLAGS,
        calls=_METHOD_CALLS,
        wrong=wrong,
    )


async def run_method(
    method: Method,
    trace: Trace,
    llm: LLM,
    *,
    label: str = "",
    step_set: float | None = DEFAULT_LEVEL,
    step_set_weights: str | None = None,
    stop_on_setup: bool = False,
) -> Attribution:
    """Run ``method`` on ``trace`` and return a self-describing Attribution.

    Usage and raw replies are collected by the LLM layer; a budget overrun, a failing
    endpoint or any other exception the method raises (a bug: ``error`` is its type and
    message) becomes a recorded error, never a made-up verdict; so does a trace with no
    steps (:data:`NO_STEPS`; the method is not run). ``step_set`` is the
    coverage level of the result's step set (None: no set); the set is computed offline
    after the method's verdict and never calls the model, with the shortlist weights file
    ``step_set_weights`` (None: the shipped one; e.g. one ``faultfinder calibrate`` wrote).
    With ``stop_on_setup`` (a batch: ``eval``), an :class:`EndpointSetupError` (a wrong key,
    a model the endpoint does not know) is raised instead, as it is no fault of this case.
    """
    started = time.perf_counter()
    verdict: Verdict
    error: str | None = None
    budget_stop: Literal["case", "run"] | None = None
    cfg = method.config
    with track_usage(max_tokens=cfg.budget_tokens) as scope:
        try:
            if not trace.steps:
                raise FaultfinderError(NO_STEPS)
            verdict = await method.attribute(trace, llm)
        except EndpointSetupError as exc:
            if stop_on_setup:
                raise
            verdict, error = Verdict(status="error"), str(exc)
        except CaseBudgetExceededError as exc:
            verdict, error, budget_stop = Verdict(status="budget-exceeded"), str(exc), "case"
        except BudgetExceededError as exc:
            verdict, error, budget_stop = Verdict(status="budget-exceeded"), str(exc), "run"
        except FaultfinderError as exc:
            verdict, error = Verdict(status="error"), str(exc)
        except Exception as exc:
            # A bug in the method or in a function model is a recorded error, as a failing
            # endpoint is: `attribute` shows it and exits 4, `eval` keeps the row and goes on.
            logger.debug("%s raised on trace '%s'", label or method.name, trace.id, exc_info=True)
            verdict, error = Verdict(status="error"), f"{type(exc).__name__}: {exc}"
    if error is not None:
        # An exception's text is not trusted to be free of keys (a function model's, a
        # URL's query): key-shaped tokens and credentials in URLs go before it is written.
        error = Redactor().text(error)
    if verdict.status == "budget-exceeded" and budget_stop is None:
        # The method itself found its work cannot fit the case's budget (it plans within
        # it, e.g. compose) and made no call that could overspend it.
        budget_stop = "case"
        error = verdict.reason or "the method's work does not fit budget_tokens"
    verdict = _step_rule(method, trace, verdict)
    gt_status = ground_truth_status(trace, cfg.with_ground_truth)
    if gt_status == "unavailable":
        logger.warning(
            "warning: trace '%s' has no reference answer; %s ran without one "
            "(recorded as ground_truth: unavailable)",
            trace.id,
            label or method.name,
        )
    chosen = None
    if step_set is not None:
        weights = weights_at(step_set_weights)
        chosen = step_set_of(trace, step_set, include=verdict.step, weights=weights)
    return Attribution(
        **verdict.model_dump(),
        step_set=chosen.steps if chosen else None,
        step_set_level=chosen.level if chosen else None,
        step_set_source=chosen.source if chosen else None,
        step_set_shift=chosen.shift if chosen else None,
        step_set_calibrated=chosen.calibrated if chosen else None,
        step_set_shift_limit=chosen.limit if chosen else None,
        trace_id=trace.id,
        method=label or method.name,
        config=cfg.model_dump(mode="json"),
        model=llm.name,
        prompt_version=cfg.prompt_version(),
        with_ground_truth=cfg.with_ground_truth,
        ground_truth=gt_status,
        observability=cfg.observability,
        budget_stop=budget_stop,
        usage=scope.usage,
        calls=scope.calls,
        error=error,
        wall_time_s=round(time.perf_counter() - started, 4),
    )


def _step_rule(method: Method, trace: Trace, verdict: Verdict) -> Verdict:
    """The one agent/step rule (``judging/pairing.py``): a step outside the trace or taken
    by another agent than the named one is marked unparsed; the agent is kept. Methods
    whose agent and step are independent draws (``pairs_agent_and_step = False``, the
    random floor) get the range check only."""
    paired = method.pairs_agent_and_step
    agent = verdict.agent if paired else None
    details = verdict.details
    if not paired:
        details = {k: v for k, v in details.items() if k != "agents"}
    ruled = apply_step_rule(trace, agent, verdict.step, verdict.status, details)
    if ruled is None:
        return verdict
    step, status, new_details = ruled
    if not paired and "agents" in verdict.details:
        new_details["agents"] = verdict.details["agents"]
    return verdict.model_copy(update={"step": step, "status": status, "details": new_details})
