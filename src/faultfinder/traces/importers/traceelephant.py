"""TraceElephant trace directories → canonical traces.

One directory per trace, in either layout the benchmark's own loader reads:

* ``trace_metadata.json`` + ``step_records.json`` (a list of ``{step_id, agent_id,
  agent_name, input, output, tool_logs}``), or
* the older ``summary.json`` + ``history.json`` (a list of ``{agent_name, request,
  response}``).

``input``/``request`` is the full OpenAI chat request: its messages go to
``Step.input_messages``, the other parameters (credentials removed) to ``Step.request``.
``output``/``response`` is a ChatCompletion ``repr`` string (read with a safe parser, never
evaluated), a JSON object, or plain text. Step ids and ``mistake_step`` are 1-based in the
source and 0-based here; the original id stays in ``Step.source_id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from faultfinder.traces.importers._common import (
    check_options,
    fail,
    json_in_text,
    make_trace,
    optional_str,
    parse_label_step,
    text_of,
    without_credentials,
)
from faultfinder.traces.importers._openai import (
    merge_tool_calls,
    read_completion,
    read_tool_logs,
    split_request,
)
from faultfinder.traces.io import UnknownKeys, natural_key, read_json
from faultfinder.traces.schema import Agent, GoldLabel, SourceInfo, Step, Trace

NEW_LAYOUT = ("trace_metadata.json", "step_records.json")
OLD_LAYOUT = ("summary.json", "history.json")
MAX_SEARCH_DEPTH = 3
"""How many directory levels below the given path are searched for trace directories."""

# Metadata fields mapped to canonical ones; all others are kept in Trace.metadata.
_MAPPED_METADATA = frozenset(
    {
        "task_instruction",
        "question",
        "ground_truth",
        "system_name",
        "agent_configuration",
        "agent_system_intro",
        "system_architecture",
        "mistake_agent",
        "mistake_step",
        "mistake_reason",
    }
)
# Metadata fields the benchmark writes that stay in Trace.metadata without a warning.
_KNOWN_METADATA = frozenset({"task_id", "benchmark_name", "run_id", "tests_status"})
# Step record fields mapped to canonical ones; all others are kept in Step.metadata.
_MAPPED_STEP = frozenset(
    {"step_id", "agent_name", "input", "output", "request", "response", "tool_logs"}
)
_KNOWN_STEP = _MAPPED_STEP | {"agent_id"}
# Keys of a per-agent configuration entry that map onto Agent fields.
_AGENT_NAME_KEYS = ("name", "agent_name", "agent")
_AGENT_PROMPT_KEYS = ("system_prompt", "system_message", "prompt", "instructions")
_AGENT_DESCRIPTION_KEYS = ("description", "role", "intro")


def _layout(directory: Path) -> tuple[str, str] | None:
    for layout in (NEW_LAYOUT, OLD_LAYOUT):
        if all((directory / name).is_file() for name in layout):
            return layout
    return None


def find_trace_dirs(root: Path, depth: int = 0) -> list[Path]:
    """Trace directories at or below ``root`` (natural name order, depth-limited)."""
    if _layout(root) is not None:
        return [root]
    if depth >= MAX_SEARCH_DEPTH:
        return []
    found: list[Path] = []
    children = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: natural_key(p.name))
    for child in children:
        found.extend(find_trace_dirs(child, depth + 1))
    return found


class TraceElephantImporter:
    """Reads one TraceElephant trace directory or a directory of them."""

    name: ClassVar[str] = "traceelephant"
    summary: ClassVar[str] = (
        "TraceElephant trace directories (trace_metadata.json + step_records.json, or "
        "summary.json + history.json)"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        try:
            return path.is_dir() and bool(find_trace_dirs(path))
        except OSError:
            return False

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        if path.is_file() and path.name in NEW_LAYOUT + OLD_LAYOUT:
            path = path.parent
        if not path.is_dir():
            fail(path, "(directory)", "expected a TraceElephant trace directory")
        directories = find_trace_dirs(path)
        if not directories:
            fail(
                path,
                "(directory)",
                "no trace directory here (one holding trace_metadata.json + step_records.json "
                "or summary.json + history.json)",
            )
        return [self.load_dir(d) for d in directories]

    def load_dir(self, directory: Path) -> Trace:
        """One trace directory as a Trace."""
        layout = _layout(directory)
        if layout is None:
            fail(directory, "(directory)", "missing trace_metadata.json / step_records.json")
        meta_path, steps_path = directory / layout[0], directory / layout[1]
        meta = read_json(meta_path)
        if not isinstance(meta, dict):
            fail(meta_path, "(root)", "expected a JSON object")
        records = read_json(steps_path)
        if not isinstance(records, list):
            fail(steps_path, "(root)", "expected a list of step records")
        old = layout == OLD_LAYOUT
        unknown_meta, unknown_steps = UnknownKeys(meta_path), UnknownKeys(steps_path)
        unknown_meta.check(meta, _MAPPED_METADATA | _KNOWN_METADATA)
        steps = [self._step(i, r, steps_path, old, unknown_steps) for i, r in enumerate(records)]
        unknown_meta.report()
        unknown_steps.report()
        metadata = {k: v for k, v in meta.items() if k not in _MAPPED_METADATA}
        label, note = self._label(meta, meta_path, steps)
        if note:
            metadata["label_note"] = note
        agents, unmapped_config = self._agents(meta.get("agent_configuration"), steps, meta_path)
        if unmapped_config is not None:
            metadata["agent_configuration"] = unmapped_config
        return make_trace(
            meta_path,
            id=f"{directory.parent.name}/{directory.name}",
            task=self._task(meta, meta_path),
            ground_truth=optional_str(meta, "ground_truth", meta_path),
            system=optional_str(meta, "system_name", meta_path),
            agents=agents,
            architecture=self._architecture(meta, meta_path),
            steps=steps,
            label=label,
            source=SourceInfo(
                format=self.name, path=str(directory), subset=self._subset(meta, directory)
            ),
            metadata=metadata,
        )

    @staticmethod
    def _task(meta: dict[str, Any], path: Path) -> str:
        for key in ("task_instruction", "question"):
            task = optional_str(meta, key, path)
            if task is not None:
                return task
        fail(path, "task_instruction", "missing: the task given to the system")

    @staticmethod
    def _subset(meta: dict[str, Any], directory: Path) -> str | None:
        system, benchmark = meta.get("system_name"), meta.get("benchmark_name")
        if system and benchmark:
            return f"{system}/{benchmark}"
        if system:
            return str(system)
        if "-runs-" in directory.parent.name:
            return directory.parent.name
        return None

    @staticmethod
    def _architecture(meta: dict[str, Any], path: Path) -> str | None:
        parts = [
            text
            for k in ("agent_system_intro", "system_architecture")
            if (text := optional_str(meta, k, path))
        ]
        return "\n\n".join(parts) or None

    @staticmethod
    def _step(position: int, record: Any, path: Path, old: bool, unknown: UnknownKeys) -> Step:
        where = f"[{position}]"
        if not isinstance(record, dict):
            fail(path, where, "expected a step record object")
        unknown.check(record, _KNOWN_STEP, where)
        agent: Any = optional_str(record, "agent_name", path, where)
        agent_id = record.get("agent_id")
        if agent is None and agent_id is not None:
            if isinstance(agent_id, bool) or not isinstance(agent_id, str | int):
                fail(path, f"{where}.agent_id", "expected a string or integer id")
            agent = str(agent_id)
        if agent is None or not agent.strip():
            fail(path, f"{where}.agent_name", "missing: every step needs its agent")
        input_key, output_key = ("request", "response") if old else ("input", "output")
        messages, request = split_request(
            record.get(input_key), path=path, where=f"{where}.{input_key}"
        )
        parts = read_completion(
            record.get(output_key), path=path, where=f"{where}.{output_key}", unknown=unknown
        )
        calls, results, unmapped = read_tool_logs(
            record.get("tool_logs"), path=path, where=f"{where}.tool_logs"
        )
        metadata = {k: without_credentials(v) for k, v in record.items() if k not in _MAPPED_STEP}
        metadata.update(parts.metadata)
        if parts.unread:  # a key the fields above do not hold: the response is kept whole
            metadata[output_key] = without_credentials(record[output_key])
        if unmapped:
            metadata["tool_logs_unmapped"] = unmapped
        step_id = record.get("step_id")
        if step_id is not None and (
            isinstance(step_id, bool) or not isinstance(step_id, str | int)
        ):
            fail(path, f"{where}.step_id", "expected a string or integer id")
        return Step(
            index=position,
            agent=text_of(agent).strip(),
            role=text_of(agent),
            kind="llm",
            content=parts.content,
            input_messages=messages,
            request=request,
            tool_calls=merge_tool_calls(parts.tool_calls, calls),
            tool_results=results,
            model=parts.model or _request_model(request),
            usage=parts.usage,
            source_id=str(step_id) if step_id is not None else str(position + 1),
            metadata=metadata,
        )

    @staticmethod
    def _label(
        meta: dict[str, Any], path: Path, steps: list[Step]
    ) -> tuple[GoldLabel | None, str | None]:
        agent = optional_str(meta, "mistake_agent", path)
        step_value = meta.get("mistake_step")
        if agent in (None, "") and step_value in (None, ""):
            return None, None
        # The benchmark's scorer counts mistake_step as a 1-based position in the step list,
        # so the position (not a step_id lookup) decides the canonical index.
        step = parse_label_step(
            step_value, path=path, field="mistake_step", n_steps=len(steps), base=1
        )
        note = None
        if step is not None and steps[step].source_id != str(step + 1):
            note = (
                f"mistake_step {step + 1} is read as a 1-based position; the step there has "
                f"step_id {steps[step].source_id}"
            )
        label = GoldLabel(
            agent=None if not agent else agent.strip(),
            step=step,
            reason=optional_str(meta, "mistake_reason", path),
        )
        return label, note

    @staticmethod
    def _agents(config: Any, steps: list[Step], path: Path) -> tuple[list[Agent], Any]:
        """Roster from agent_configuration (when its shape is recognised) plus step agents.

        Returns (agents, the configuration itself when it could not be mapped, else None).
        """
        agents, unmapped = _agents_from_config(config, {s.agent for s in steps}, path)
        known = {a.name for a in agents}
        for step in steps:
            if step.agent not in known:
                known.add(step.agent)
                agents.append(Agent(name=step.agent))
        return agents, unmapped


def _request_model(request: dict[str, Any] | None) -> str | None:
    model = (request or {}).get("model")
    return model if isinstance(model, str) else None


def _agents_from_config(config: Any, step_agents: set[str], path: Path) -> tuple[list[Agent], Any]:
    """Agents from a configuration shaped as a list of agent objects, a dict with an 'agents'
    list or mapping, or a mapping keyed by agent names (recognised only when at least one key
    names an agent that acts in the trace, so {'llm_config': {...}} is not read as a roster).
    """
    if config in (None, "", [], {}):
        return [], None
    if isinstance(config, str):
        decoded = json_in_text(config, path=path, where="agent_configuration")
        if decoded is None:
            return [], config
        if isinstance(decoded, dict | list):
            return _agents_from_config(decoded, step_agents, path)
        return [], config
    entries: list[tuple[str | None, Any]] = []
    if isinstance(config, dict) and isinstance(config.get("agents"), list | dict):
        agents_part = config["agents"]
        if isinstance(agents_part, dict):
            entries = list(agents_part.items())
        else:
            entries = [(None, e) for e in agents_part]
    elif isinstance(config, list):
        entries = [(None, e) for e in config]
    elif (
        isinstance(config, dict)
        and all(isinstance(v, dict | str) for v in config.values())
        and any(str(k).strip() in step_agents for k in config)
    ):
        entries = list(config.items())
    agents: list[Agent] = []
    for key, entry in entries:
        agent = _agent_from_entry(key, entry)
        if agent is None:
            return [], config
        agents.append(agent)
    if not agents:
        return [], config
    if isinstance(config, dict) and "agents" in config:
        rest = {k: v for k, v in config.items() if k != "agents"}
        return agents, (without_credentials(rest) or None)
    return agents, None


def _agent_from_entry(key: str | None, entry: Any) -> Agent | None:
    if isinstance(entry, str):
        return Agent(name=key, system_prompt=entry) if key else None
    if not isinstance(entry, dict):
        return None
    name = key
    for k in _AGENT_NAME_KEYS:
        if isinstance(entry.get(k), str):
            name = entry[k]
            break
    if not name:
        return None
    used = {k for k in _AGENT_NAME_KEYS if k in entry}
    prompt = _pick(entry, _AGENT_PROMPT_KEYS, used)
    description = _pick(entry, _AGENT_DESCRIPTION_KEYS, used)
    model = entry.get("model")
    llm_config = entry.get("llm_config")
    if isinstance(model, str):
        used.add("model")
    elif isinstance(llm_config, dict):
        model = llm_config.get("model")
    rest = without_credentials({k: v for k, v in entry.items() if k not in used})
    return Agent(
        name=name.strip(),
        system_prompt=prompt,
        description=description,
        model=model if isinstance(model, str) else None,
        config=rest,
    )


def _pick(entry: dict[str, Any], keys: tuple[str, ...], used: set[str]) -> str | None:
    for key in keys:
        if isinstance(entry.get(key), str):
            used.add(key)
            return str(entry[key])
    return None
