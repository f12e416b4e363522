"""What ECHO's models must answer: pydantic schemas, their parsers, and the JSON schemas
(agent names and step numbers as enums) handed to backends that can constrain output.

Parsers raise :class:`ParseError`, so the LLM layer re-samples and finally records the
reply as unparsed; nothing here fills in a missing answer.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator

from faultfinder.judging.agent_names import match_agent
from faultfinder.judging.answer_json import closing_bracket, extract_json, json_tagged
from faultfinder.judging.answers import answer_part, parse_step_number
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import ParseError
from faultfinder.methods.echo.voting import ConclusionType

_NO_STEP = {"", "none", "null", "n/a", "na", "unknown", "-"}


def _coerce_step(value: Any) -> Any:
    """'none'/'' → None; any other string or number is read by
    :func:`answers.parse_step_number` ('Step 7', '7', 'step_7' → 7), the rule every method's
    step field follows, so two steps ('2 or 3', 'steps 3-4'), a decimal ('3.5') or a hedge
    raise (a ValueError: pydantic reports it as this field's error). Anything else is left
    to pydantic."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in _NO_STEP:
            return None
        return parse_step_number(text)
    if isinstance(value, float):
        return parse_step_number(value)
    return value


def _coerce_type(value: Any) -> Any:
    if isinstance(value, str):
        key = re.sub(r"[\s\-]+", "_", value.strip().lower())
        aliases = {
            "single": "single_agent",
            "multi": "multi_agent",
            "multiple_agent": "multi_agent",
            # the prompt's own wording: "Single agent error", "Multi-agent error"
            "single_agent_error": "single_agent",
            "multi_agent_error": "multi_agent",
        }
        return aliases.get(key, key)
    return value


class Evaluation(BaseModel):
    """An analyst's assessment of one agent."""

    agent_name: str
    """The agent assessed."""
    step_index: int | None = None
    """The step the assessment is about, if any."""
    error_likelihood: float = Field(ge=0.0, le=1.0)
    """Probability in [0, 1] that this agent caused the failure."""
    reasoning: str = ""
    """Why the agent may or may not have caused the error."""
    evidence: str = ""
    """Specific evidence for the assessment."""

    @field_validator("step_index", mode="before")
    @classmethod
    def _step(cls, value: Any) -> Any:
        return _coerce_step(value)


class Conclusion(BaseModel):
    """A conclusion: the primary one or an alternative hypothesis."""

    type: ConclusionType
    """'single_agent' or 'multi_agent'."""
    attribution: list[str] | None = None
    """Responsible agent name(s), or null when no agent is clearly at fault."""
    mistake_step: int | None = None
    """Step (0-based, as numbered in the prompt) of the decisive mistake."""
    confidence: float = Field(ge=0.0, le=1.0)
    """Confidence σ in [0, 1]."""
    reasoning: str = ""
    """Explanation, including which step the error occurred in."""

    @field_validator("mistake_step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> Any:
        return _coerce_step(value)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        return _coerce_type(value)

    @field_validator("attribution", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value] if value.strip() else None
        return value


class Analysis(BaseModel):
    """The structured analysis every objective analyst returns (paper §3.2)."""

    analysis_summary: str = ""
    """Brief overview of the investigation and findings."""
    agent_evaluations: list[Evaluation] = Field(default_factory=list)
    """Per-agent assessments."""
    primary_conclusion: Conclusion
    """The analyst's main attribution."""
    alternative_hypotheses: list[Conclusion] = Field(default_factory=list)
    """Other attributions that remain plausible."""
    _dropped: list[str] = PrivateAttr(default_factory=list)

    @property
    def dropped_names(self) -> list[str]:
        """Agent names in evaluations/alternatives that matched no agent and were left out."""
        return self._dropped


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return f"field '{where}': {first['msg']}{more}"


def _unclosed(text: str) -> bool:
    """True when the JSON that starts at the first '{' never closes (a reply cut off at the
    token limit): then any inner object found would be a misleading parse."""
    start = text.find("{")
    return start >= 0 and closing_bracket(text, start) is None


def _object(text: str) -> dict[str, Any]:
    text = answer_part(text)
    tagged = json_tagged(text)
    if tagged is not None:  # the answer asked for: prose before it may quote JSON
        text = tagged
    elif "<json>" in text.lower() and "</json>" not in text.lower():
        raise ParseError("the <json> block is cut off before its end (reply too long?)")
    if _unclosed(text):
        raise ParseError("the JSON object is cut off before its end (reply too long?)")
    data = extract_json(text)
    if not isinstance(data, dict):
        raise ParseError("expected a JSON object, got a list")
    return data


def parse_analysis(text: str, agents: Sequence[str]) -> Analysis:
    """Read an analyst's reply; agent names are mapped to the roster.

    An unknown agent in the primary conclusion makes the reply unparseable (it would vote
    for nobody); unknown agents in evaluations and alternatives are dropped and listed.
    """
    data = _object(text)
    try:
        analysis = Analysis.model_validate(data)
    except ValidationError as exc:
        raise ParseError(_validation_message(exc)) from None
    primary = analysis.primary_conclusion
    if primary.attribution:
        matched = (match_agent(a, agents) for a in primary.attribution)
        primary.attribution = list(dict.fromkeys(matched))
    dropped: list[str] = []
    evaluations: list[Evaluation] = []
    for evaluation in analysis.agent_evaluations:
        try:
            evaluation.agent_name = match_agent(evaluation.agent_name, agents)
        except ParseError:
            dropped.append(evaluation.agent_name)
            continue
        evaluations.append(evaluation)
    alternatives: list[Conclusion] = []
    for alternative in analysis.alternative_hypotheses:
        try:
            names = [match_agent(a, agents) for a in alternative.attribution or []]
        except ParseError:
            dropped.extend(alternative.attribution or [])
            continue
        alternative.attribution = list(dict.fromkeys(names)) or None
        alternatives.append(alternative)
    analysis.agent_evaluations = evaluations
    analysis.alternative_hypotheses = alternatives
    analysis._dropped = dropped
    return analysis


class JudgeAnswer(BaseModel):
    """The final judge's decision in the context-aware ablations (paper A.6)."""

    mistake_agent: str
    """Agent whose argument was most convincing."""
    mistake_step: int | str
    """Step number of the mistake."""
    mistake_reason: str = ""
    """Why this agent/step caused the wrong final answer."""


class JudgeVerdict(BaseModel):
    """A judge answer checked against the trace."""

    agent: str
    """Roster name."""
    step: int
    """Canonical 0-based step as answered (the agent/step rule checks it)."""
    reason: str
    """The judge's explanation."""


def parse_judge(text: str, agents: Sequence[str], n_steps: int) -> JudgeVerdict:
    """Read the judge's JSON; the agent must be on the roster (the step is checked later)."""
    try:
        answer = JudgeAnswer.model_validate(_object(text))
    except ValidationError as exc:
        raise ParseError(_validation_message(exc)) from None
    return JudgeVerdict(
        agent=match_agent(answer.mistake_agent, agents),
        # Range and speaker are checked by the agent/step rule (judging/pairing.py), which
        # keeps the agent when the step cannot stand.
        step=parse_step_number(str(answer.mistake_step)),
        # The reason it states, or (stating none) the whole answer, as every method records.
        reason=answer.mistake_reason.strip() or answer_part(text).strip(),
    )


class CompressedStepAnswer(BaseModel):
    """The LLM extractor's three compressions of one step."""

    key_decision: str
    """The step's key decision or main point (L2)."""
    summary: str
    """A brief outcome summary (L3)."""
    milestone: str
    """The milestone or state change it represents (L4)."""


def parse_compressed(text: str) -> CompressedStepAnswer:
    """Read the LLM extractor's JSON; all three fields must be non-empty."""
    try:
        answer = CompressedStepAnswer.model_validate(_object(text))
    except ValidationError as exc:
        raise ParseError(_validation_message(exc)) from None
    for name in ("key_decision", "summary", "milestone"):
        if not getattr(answer, name).strip():
            raise ParseError(f"field '{name}' is empty")
    return answer


SECTION_TITLES = ("Purpose", "Assumptions and Information", "Errors", "Evidence")
# A header is matched from the start of its own line (blank lines above it are left to the
# text before), with possessive runs: a long run of blank lines or spaces costs linear time,
# not a scan to the end of the run from every line start in it.
_SECTION = re.compile(
    r"^[^\S\n]*+(?:(?:#++|\*\*)\s*+)?(" + "|".join(SECTION_TITLES) + r")"
    r"\s*(?:\*\*)?\s*:?\s*(?:\*\*)?",
    flags=re.IGNORECASE | re.MULTILINE,
)


def parse_sections(text: str) -> dict[str, str]:
    """The context-aware agent's argument, split by its section headers (paper A.4).

    At least the 'Errors' or 'Evidence' section must be present and non-empty: an argument
    without either says nothing for the judge to weigh.
    """
    text = answer_part(text)
    matches = list(_SECTION.finditer(text))
    sections: dict[str, str] = {}
    for position, match in enumerate(matches):
        end = matches[position + 1].start() if position + 1 < len(matches) else len(text)
        title = next(t for t in SECTION_TITLES if t.lower() == match.group(1).lower())
        sections[title] = text[match.end() : end].strip()
    if not (sections.get("Errors") or sections.get("Evidence")):
        raise ParseError("no non-empty '## Errors' or '## Evidence' section")
    return sections


# --- JSON schemas for constrained output ---------------------------------------------


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace local $refs by their definitions and require every property."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(copy.deepcopy(defs[ref.split("/")[-1]]))
            out = {k: walk(v) for k, v in node.items() if k not in ("title", "default")}
            if out.get("type") == "object" and "properties" in out:
                out["required"] = list(out["properties"])
                out["additionalProperties"] = False
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


def _step_enum(n_steps: int, nullable: bool) -> dict[str, Any]:
    values: list[int | None] = list(range(n_steps))
    return {"enum": [*values, None] if nullable else values}


def analysis_json_schema(agents: Sequence[str], n_steps: int) -> dict[str, Any]:
    """The :class:`Analysis` JSON schema with agent names and step numbers as enums.

    No $refs and no numeric bounds beyond the enums, so llama.cpp's schema-to-grammar
    converter handles it; alternatives are capped at 3 to keep small models brief.
    """
    schema = _inline(Analysis.model_json_schema())
    props = schema["properties"]
    schema["required"] = list(props)
    agent_enum = {"enum": list(agents)}
    evaluation = props["agent_evaluations"]["items"]["properties"]
    evaluation["agent_name"] = agent_enum
    evaluation["step_index"] = _step_enum(n_steps, nullable=True)
    props["agent_evaluations"]["maxItems"] = max(len(agents), 1)
    attribution = {
        "anyOf": [
            {"type": "array", "items": agent_enum, "minItems": 1, "maxItems": len(agents)},
            {"type": "null"},
        ]
    }
    for conclusion in (props["primary_conclusion"], props["alternative_hypotheses"]["items"]):
        conclusion["properties"]["attribution"] = attribution
        conclusion["properties"]["mistake_step"] = _step_enum(n_steps, nullable=True)
    props["alternative_hypotheses"]["maxItems"] = 3
    return schema


def judge_json_schema(agents: Sequence[str], n_steps: int) -> dict[str, Any]:
    """The judge's answer with the agent and step restricted to the trace."""
    schema = _inline(JudgeAnswer.model_json_schema())
    schema["properties"]["mistake_agent"] = {"enum": list(agents)}
    schema["properties"]["mistake_step"] = _step_enum(n_steps, nullable=False)
    return schema


def compressed_json_schema() -> dict[str, Any]:
    """The LLM extractor's answer."""
    return _inline(CompressedStepAnswer.model_json_schema())


def constraint(schema: dict[str, Any]) -> OutputConstraint:
    """An output constraint carrying ``schema``."""
    return OutputConstraint(json_schema=schema)
