"""Who&When (ICML 2025) JSON files → canonical traces.

Each file is one failed run: ``question``, ``ground_truth``, ``history`` (a list of
``{content, role[, name]}``), the labels ``mistake_agent`` / ``mistake_step`` (a 0-based
string index into ``history``) / ``mistake_reason``, and ``question_ID`` / ``level``.

* **Algorithm-Generated** (CaptainAgent teams on AG2): the speaker is ``name``; ``role`` is
  AG2's chat role ('user'/'assistant'); ``system_prompt`` maps agent → system prompt;
  ``is_correct`` records the outcome.
* **Hand-Crafted** (Magentic-One): the speaker is ``role``, written ``Orchestrator (thought)``
  or ``Orchestrator (-> WebSurfer)``; labels use the bare ``Orchestrator``; ``is_corrected``
  records whether the annotation was revised.

Step kind rule: 'human' for the human turn (role 'human'); 'tool' for the code executors
(``Computer_terminal`` in AG2 logs, ``ComputerTerminal`` in Magentic-One logs), whose
messages are execution results, not model output; 'system' for Magentic-One's
``Orchestrator (termination condition)`` messages, which the harness writes; 'llm' otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import (
    check_options,
    fail,
    make_trace,
    optional_str,
    parse_label_step,
)
from faultfinder.traces.io import UnknownKeys, data_stem, data_suffix, natural_key, read_json
from faultfinder.traces.schema import Agent, GoldLabel, SourceInfo, Step, StepKind, Trace

ALGORITHM_GENERATED = "Algorithm-Generated"
HAND_CRAFTED = "Hand-Crafted"
SUBSETS = (ALGORITHM_GENERATED, HAND_CRAFTED)
SYSTEMS = {ALGORITHM_GENERATED: "captain-agent", HAND_CRAFTED: "magentic-one"}

CODE_EXECUTORS = frozenset({"Computer_terminal", "ComputerTerminal"})
"""Speakers whose messages are code-execution output (AG2 and Magentic-One executors)."""
HARNESS_ROLES = frozenset({"Orchestrator (termination condition)"})
"""Hand-Crafted roles written by the run harness rather than a model."""

# Top-level fields mapped to canonical ones; everything else goes to Trace.metadata.
_MAPPED = frozenset(
    {"question", "ground_truth", "history", "mistake_agent", "mistake_step", "mistake_reason"}
    | {"system_prompt"}
)
# Top-level fields the released files also carry, kept in Trace.metadata without a warning.
_KNOWN_EXTRA = frozenset(
    {"question_ID", "level", "is_correct", "is_corrected", "mistake_type", "labels"}
)
_MESSAGE_KEYS = frozenset({"content", "role", "name"})
_OPTIONS = {"subset": f"force the subset ({' or '.join(SUBSETS)}) instead of detecting it"}
# The agent (and the answer) end at their last non-blank character, found greedily: a lazy
# '.*?' followed by '\s*' rescans a long run of spaces from each of its characters.
_SUFFIX = re.compile(r"^(?P<agent>(?:.*\S)?)\s*\((?P<detail>[^()]*)\)\s*$")
_FINAL_ANSWER = re.compile(r"^FINAL ANSWER:\s*+(?P<answer>(?:.*\S)?)\s*$", re.MULTILINE)


def normalise_agent(role: str) -> str:
    """'Orchestrator (thought)' and 'Orchestrator (-> WebSurfer)' → 'Orchestrator'."""
    match = _SUFFIX.match(role)
    if match and match.group("agent"):
        return match.group("agent")
    return role.strip()


def step_kind(agent: str, raw_role: str | None) -> StepKind:
    """The kind rule described in the module docstring."""
    if raw_role == "human" or agent == "human":
        return "human"
    if agent in CODE_EXECUTORS:
        return "tool"
    if raw_role in HARNESS_ROLES:
        return "system"
    return "llm"


def _looks_like_file(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("history"), list)
        and "question" in data
        and "steps" not in data
    )


def _json_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.glob("*.json") if p.is_file()), key=lambda p: natural_key(p.stem)
    )


class WhoAndWhenImporter:
    """Reads Who&When files, subset directories, or the dataset root."""

    name: ClassVar[str] = "who-and-when"
    summary: ClassVar[str] = (
        "Who&When benchmark JSON (Algorithm-Generated / Hand-Crafted): a file, a subset "
        "directory or the dataset root"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if path.is_dir():
            if any((path / s).is_dir() for s in SUBSETS):
                return True
            # A flat folder is Who&When's only when every JSON file in it is: a folder that
            # mixes formats is read file by file (each in its own), whatever sorts first.
            files = _json_files(path)
            return bool(files) and all(self._detect_file(f) for f in files)
        return self._detect_file(path)

    def _detect_file(self, path: Path) -> bool:
        if data_suffix(path) != ".json" or not path.is_file():
            return False
        try:
            return _looks_like_file(read_json(path))
        except TraceFormatError:
            return False

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, _OPTIONS)
        forced = options.get("subset")
        if forced is not None and forced not in SUBSETS:
            fail(path, "(option subset)", f"must be one of {', '.join(SUBSETS)}, got {forced!r}")
        path = Path(path)
        if path.is_file():
            return [self.load_file(path, subset=forced)]
        if not path.is_dir():
            fail(path, "(file)", "no such file or directory")
        subset_dirs = [path / s for s in SUBSETS if (path / s).is_dir()]
        if subset_dirs:
            return [self.load_file(f, subset=forced) for d in subset_dirs for f in _json_files(d)]
        files = _json_files(path)
        if not files:
            fail(path, "(directory)", "no Who&When .json files and no subset directories here")
        return [self.load_file(f, subset=forced) for f in files]

    def load_file(self, path: Path, subset: str | None = None) -> Trace:
        """One Who&When file as a Trace."""
        data = read_json(path)
        if not isinstance(data, dict):
            fail(path, "(root)", "expected a JSON object")
        history = data.get("history")
        if not isinstance(history, list):
            fail(path, "history", "missing or not a list")
        question = data.get("question")
        if not isinstance(question, str):
            fail(path, "question", "missing or not a string")
        unknown = UnknownKeys(path)
        unknown.check(data, _MAPPED | _KNOWN_EXTRA)
        subset = subset or self._subset(path, data)
        steps = [self._step(i, item, subset, path, unknown) for i, item in enumerate(history)]
        unknown.report()
        return make_trace(
            path,
            id=f"{subset}/{data_stem(path)}",
            task=question,
            ground_truth=optional_str(data, "ground_truth", path),
            final_answer=self._final_answer(steps),
            system=SYSTEMS[subset],
            agents=self._agents(data, steps, path),
            steps=steps,
            label=self._label(data, len(steps), path),
            source=SourceInfo(format=self.name, path=str(path), subset=subset),
            metadata={k: v for k, v in data.items() if k not in _MAPPED},
        )

    @staticmethod
    def _subset(path: Path, data: dict[str, Any]) -> str:
        if path.parent.name in SUBSETS:
            return path.parent.name
        has_names = any(isinstance(h, dict) and "name" in h for h in data["history"])
        return ALGORITHM_GENERATED if has_names or "system_prompt" in data else HAND_CRAFTED

    @staticmethod
    def _step(index: int, item: Any, subset: str, path: Path, unknown: UnknownKeys) -> Step:
        where = f"history[{index}]"
        if not isinstance(item, dict):
            fail(path, where, "expected an object with content and role")
        unknown.check(item, _MESSAGE_KEYS, where)
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            fail(path, f"{where}.content", "expected a string")
        raw_role = item.get("role")
        if raw_role is not None and not isinstance(raw_role, str):
            fail(path, f"{where}.role", "expected a string")
        if subset == ALGORITHM_GENERATED:
            speaker = item.get("name")
            if not isinstance(speaker, str) or not speaker.strip():
                fail(path, f"{where}.name", "missing speaker name (Algorithm-Generated logs)")
            agent = speaker.strip()
        else:
            if not raw_role or not raw_role.strip():
                fail(path, f"{where}.role", "missing speaker role (Hand-Crafted logs)")
            agent = normalise_agent(raw_role)
        return Step(
            index=index,
            agent=agent,
            role=raw_role,
            kind=step_kind(agent, raw_role),
            content=content or "",
            source_id=str(index),
            metadata={k: v for k, v in item.items() if k not in _MESSAGE_KEYS},
        )

    @staticmethod
    def _agents(data: dict[str, Any], steps: list[Step], path: Path) -> list[Agent]:
        prompts = data.get("system_prompt") or {}
        if not isinstance(prompts, dict):
            fail(path, "system_prompt", "expected an object mapping agent names to prompts")
        for name, prompt in prompts.items():
            if not isinstance(prompt, str):
                fail(path, f"system_prompt.{name}", "expected the agent's prompt as a string")
        agents = [Agent(name=name, system_prompt=p) for name, p in prompts.items()]
        known = {a.name for a in agents}
        for step in steps:
            if step.kind != "human" and step.agent not in known:
                known.add(step.agent)
                agents.append(Agent(name=step.agent))
        return agents

    @staticmethod
    def _label(data: dict[str, Any], n_steps: int, path: Path) -> GoldLabel | None:
        agent = optional_str(data, "mistake_agent", path)
        step_value = data.get("mistake_step")
        reason = optional_str(data, "mistake_reason", path)
        if agent is None and step_value is None:
            return None
        step = parse_label_step(
            step_value, path=path, field="mistake_step", n_steps=n_steps, base=0
        )
        return GoldLabel(agent=None if agent is None else agent.strip(), step=step, reason=reason)

    @staticmethod
    def _final_answer(steps: list[Step]) -> str | None:
        # Magentic-One's harness prints 'FINAL ANSWER: ...' in its termination message.
        for step in reversed(steps):
            if step.kind == "system":
                match = _FINAL_ANSWER.search(step.content)
                if match:
                    return match.group("answer")
        return None
