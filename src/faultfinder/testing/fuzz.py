"""Mutation fuzzing of the trace readers: every input gives a clear error or a correct trace.

Each :class:`FuzzTarget` names a reader (an importer's ``--format``, or ``faultfinder`` for
canonical files) and a seed input that it reads cleanly. :func:`fuzz` copies the seed,
damages one of its JSON files in one way (``faultfinder.testing.mutations.MUTATIONS``),
reads the copy and judges the outcome against what that damage must cause:

* **crash** — anything but a TraceFormatError escaped (or a trace that cannot be written
  and read back);
* **misread** — the reader accepted damage it had to report: a renamed key that it maps
  (``mistake_agent`` → ``mistake_agnet``) or a value of another type (a number where text
  belongs) read without an error or a warning and without keeping the value verbatim;
  NaN, huge numbers, duplicate keys, invalid UTF-8 or deep nesting accepted; a line
  separator (U+2028...) or a harmless re-encoding (CRLF, BOM, key order) changing the trace;
* **error** / **ok** — the reader did what it had to.

Adding a reader to the fuzzer is one line in :data:`TARGETS`. Seeds are paths relative to
the repository root (test fixtures), so the fuzzer runs from a checkout.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.testing.mutations import Mutation, json_type, mutate, nodes
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace


@dataclass(frozen=True)
class FuzzTarget:
    """A reader and a seed input it reads cleanly."""

    format: str
    """Importer name (``--format``), or 'faultfinder' for canonical trace files."""
    seed: str
    """Seed file or directory, relative to the repository root."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Importer options (``--map``) the seed needs."""

    @property
    def label(self) -> str:
        return f"{self.format}:{'/'.join(Path(self.seed).parts[-2:])}"


_FIX = "tests/fixtures"
TARGETS: list[FuzzTarget] = [
    FuzzTarget("who-and-when", f"{_FIX}/importers/whoandwhen/Algorithm-Generated/1.json"),
    FuzzTarget("who-and-when", f"{_FIX}/importers/whoandwhen/Hand-Crafted/1.json"),
    FuzzTarget("generic", f"{_FIX}/importers/generic/chat.jsonl"),
    FuzzTarget("generic", f"{_FIX}/importers/generic/functions.jsonl"),
    FuzzTarget(
        "generic",
        f"{_FIX}/importers/generic/wrapped.json",
        {
            "messages_key": "turns",
            "agent_field": "speaker",
            "role_field": "speaker",
            "content_field": "text",
            "step_base": "1",
        },
    ),
    FuzzTarget("traceelephant", f"{_FIX}/importers/traceelephant/captain-runs-gaia/task_7"),
    FuzzTarget("traceelephant", f"{_FIX}/importers/traceelephant/magentic-runs-old/task_3"),
    FuzzTarget("faultfinder", f"{_FIX}/core/tiny_trace.json"),
    FuzzTarget("faultfinder", f"{_FIX}/eval/traces.jsonl"),
]
"""Readers under test. New importers add one line here."""

SPAN_TARGETS: list[FuzzTarget] = [
    FuzzTarget("otlp", f"{_FIX}/importers/otlp/genai.json"),
    FuzzTarget("otlp", f"{_FIX}/importers/otlp/envelope.jsonl"),
    FuzzTarget("otlp", f"{_FIX}/otel/openai-agents-openinference.otlp.jsonl"),
    FuzzTarget("otlp", f"{_FIX}/otel/crewai-agents-only.otlp.jsonl"),
    FuzzTarget("otlp", f"{_FIX}/otel/traceloop-team.otlp.jsonl"),
    FuzzTarget("otlp", f"{_FIX}/otel/autogen-selector.otlp.jsonl"),
    FuzzTarget("otlp", f"{_FIX}/otel/pydantic-ai-delegation.otlp.jsonl"),
    FuzzTarget("langfuse", f"{_FIX}/importers/langfuse/observations-page.json"),
    FuzzTarget("phoenix", f"{_FIX}/importers/phoenix/rest-spans.json"),
    FuzzTarget("phoenix", f"{_FIX}/importers/phoenix/spans.jsonl"),
    FuzzTarget("mlflow", f"{_FIX}/otel/mlflow-team.trace.json"),
    FuzzTarget("langsmith", f"{_FIX}/otel/langsmith-team.runs.json"),
    FuzzTarget("ag2", f"{_FIX}/importers/ag2/runtime.jsonl"),
    FuzzTarget("ag2", f"{_FIX}/importers/ag2/no-call-id.runtime.jsonl"),
]
"""Readers of tracing formats (OTLP, Langfuse, Phoenix, MLflow, LangSmith, AG2 logs), held
to the same rule as :data:`TARGETS`: a damaged field the mapping does not use is kept
verbatim (each span's or record's source in the trace), so it is never lost silently."""

Verdict = Literal["ok", "error", "crash", "misread"]


@dataclass
class Outcome:
    target: str
    mutation: str
    verdict: Verdict
    detail: str = ""


def _free_form(trace: dict[str, Any]) -> list[Any]:
    """Parts of a dumped trace that keep source data verbatim."""
    parts: list[Any] = [trace.get("metadata"), trace.get("task")]
    for step in trace.get("steps", []):
        parts += [step.get("metadata"), step.get("request"), step.get("input_messages")]
        parts += [step.get("content"), step.get("role"), step.get("source_id")]
        parts += [step.get("tool_calls"), step.get("tool_results")]
    parts += [agent.get("config") for agent in trace.get("agents", [])]
    parts.append({agent["name"]: agent.get("system_prompt") for agent in trace.get("agents", [])})
    return parts


def _deep(value: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Nodes of ``value``, also inside strings that hold JSON text (tool arguments)."""
    for path, node in nodes(value):
        yield path, node
        if isinstance(node, str) and node[:1] in ("{", "["):
            try:
                inner = json.loads(node)
            except ValueError:
                continue
            yield from nodes(inner, path)


def _contains(haystack: Any, key: Any, value: Any) -> bool:
    """True when ``value`` (same JSON type) sits anywhere in ``haystack`` — under ``key``
    for booleans, which are too common to count as found on their own."""
    wanted = json.dumps(value, sort_keys=True)
    for path, node in _deep(haystack):
        if isinstance(value, bool) and (not path or path[-1] != key):
            continue
        if json_type(node) == json_type(value) and json.dumps(node, sort_keys=True) == wanted:
            return True
        structure = isinstance(value, dict | list) and isinstance(node, str)
        if structure and node == json.dumps(value, ensure_ascii=False):
            return True
    return False


def _has_key(haystack: Any, key: str) -> bool:
    return any(p and p[-1] == key for p, _ in _deep(haystack))


@dataclass
class _Read:
    traces: list[Trace] | None
    warnings: set[str]
    error: str | None = None
    crash: str | None = None


def _read(target: FuzzTarget, where: Path) -> _Read:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            traces = load_traces(where, format=target.format, **dict(target.options))
            for trace in traces:  # what a writer writes, a reader must read back
                again = trace_from_dict(json.loads(trace.model_dump_json()), "<round trip>")
                if again != trace:
                    return _Read(None, set(), crash="trace changed on write + read back")
        except TraceFormatError as exc:
            return _Read(None, set(), error=str(exc))
        except Exception as exc:  # the point of the fuzzer: any other exception is a crash
            return _Read(None, set(), crash=f"{type(exc).__name__}: {str(exc)[:120]}")
    messages = {str(w.message) for w in caught if issubclass(w.category, TraceFormatWarning)}
    return _Read(traces, messages)


def _dumps(traces: list[Trace]) -> list[dict[str, Any]]:
    # The roster's order follows key order in some sources, which JSON does not fix.
    dumped = [t.model_dump(mode="json", exclude={"source": {"path"}}) for t in traces]
    for d in dumped:
        d["agents"] = sorted(d["agents"], key=lambda a: json.dumps(a, sort_keys=True))
    return dumped


def judge(mutation: Mutation, read: _Read, baseline: _Read) -> tuple[Verdict, str]:
    """The verdict for one read of one damaged input."""
    if read.crash is not None:
        return "crash", read.crash
    if read.traces is None:
        if mutation.expect == "same" and mutation.char is None:
            return "misread", f"harmless re-encoding refused: {read.error}"
        if mutation.char is not None and "'(json)'" in (read.error or ""):
            # The JSON was valid: a reader that calls it broken cut a line at the separator.
            return "misread", f"U+{ord(mutation.char):04X} broke the JSON: {read.error}"
        return "error", read.error or ""
    assert baseline.traces is not None
    dumped = _dumps(read.traces)
    new_warnings = read.warnings - baseline.warnings
    if mutation.expect == "error":
        return "misread", "accepted input it had to refuse"
    if mutation.expect == "same":
        if mutation.char is None:
            same = dumped == _dumps(baseline.traces) and not new_warnings
            return ("ok", "") if same else ("misread", "re-encoding changed the traces")
        strings = (v for _, v in _deep(dumped) if isinstance(v, str))
        if not any(mutation.char in v for v in strings):
            return "misread", f"U+{ord(mutation.char):04X} lost"
        return "ok", ""
    if mutation.expect == "flag" and not new_warnings:
        if isinstance(mutation.keep, str):  # a renamed key must be kept as it is
            found = any(_has_key(part, mutation.keep) for d in dumped for part in _free_form(d))
        else:
            key, value = mutation.keep
            found = any(_contains(part, key, value) for d in dumped for part in _free_form(d))
        if not found:
            return "misread", "damage accepted silently and not kept verbatim"
    return "ok", ""


def _write(files: Mapping[str, bytes], root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def seed_files(target: FuzzTarget, repo: Path) -> tuple[dict[str, bytes], str]:
    """The seed's files (relative name → bytes) and the name to read."""
    seed = repo / target.seed
    if seed.is_dir():
        files = {str(p.relative_to(seed)): p.read_bytes() for p in seed.rglob("*") if p.is_file()}
        return files, "."
    return {seed.name: seed.read_bytes()}, seed.name


def fuzz(
    targets: list[FuzzTarget], n: int, *, seed: int = 0, repo: Path | None = None
) -> list[Outcome]:
    """Read ``n`` damaged inputs spread over ``targets``; one Outcome each."""
    repo = repo or Path.cwd()
    rng = random.Random(seed)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="ff-fuzz-") as tmp:
        for t_index, target in enumerate(targets):
            files, entry = seed_files(target, repo)
            root = Path(tmp) / f"t{t_index}" / Path(target.seed).name
            _write(files, root)
            where = root / entry if entry != "." else root
            baseline = _read(target, where)
            if baseline.traces is None:
                raise RuntimeError(f"seed {target.seed} does not read: {baseline}")
            share = n // len(targets) + (1 if t_index < n % len(targets) else 0)
            for _ in range(share):
                mutation = mutate(files, rng)
                _write(mutation.files, root)
                verdict, detail = judge(mutation, _read(target, where), baseline)
                outcomes.append(Outcome(target.label, mutation.name, verdict, detail))
    return outcomes
