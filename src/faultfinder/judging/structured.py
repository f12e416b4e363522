"""Helpers shared by DoVer's stages: JSON answers, log rendering."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from faultfinder.judging.answer_json import extract_json
from faultfinder.judging.fitting import fit_steps
from faultfinder.judging.reasoning import answer_part
from faultfinder.judging.render import RenderOptions
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import ParseError
from faultfinder.traces.schema import Step, Trace

M = TypeVar("M", bound=BaseModel)

MAX_STEP_CHARS = 2000
"""Per-step cap when a stage renders steps (long tool outputs are cut with a marker)."""


def json_parser(model: type[M], check: Callable[[M], None] | None = None) -> Callable[[str], M]:
    """A parser for ``llm.chat(parse=...)``: the answer's JSON object as ``model``."""

    def parse(text: str) -> M:
        data = extract_json(answer_part(text))
        try:
            value = model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(root)"
            raise ParseError(f"{where}: {first['msg']}") from None
        if check is not None:
            check(value)
        return value

    return parse


def schema_constraint(schema: dict[str, Any]) -> OutputConstraint:
    return OutputConstraint(json_schema=schema)


def render_log(
    trace: Trace,
    steps: Sequence[Step],
    *,
    budget: int | None,
    count_tokens: Callable[[str], int],
    reserved: int = 0,
) -> str:
    """Steps as 'Step N - agent: output' lines within a token budget."""
    options = RenderOptions(
        observability="outputs", step_indices=True, max_step_chars=MAX_STEP_CHARS
    )
    text, _truncated = fit_steps(trace, steps, options, budget, count_tokens, reserved)
    return text or "(no steps)"
