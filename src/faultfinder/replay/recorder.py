"""Run directories: each model call appended to ``steps.jsonl`` as it completes (fsynced),
``trace.json`` rebuilt from it, ``meta.json`` describing the run.

Layout::

    runs/<run-id>/
        meta.json       command, upstream(s), timestamps, exit code, task, reference answer
        steps.jsonl     one RecordedCall per line, in completion order
        trace.json      the canonical Trace built from steps.jsonl
        stdout.txt      the recorded program's output (stderr.txt likewise)
        branches/<id>/  replays of this run, each laid out the same way plus report.json

A program that crashes mid-run leaves every completed call in ``steps.jsonl``; the last
line may be cut short if the recorder itself was killed, and is then skipped.

What the files hold (:class:`RecordedCall`, :class:`RunMeta`, the file names) is in
:mod:`faultfinder.replay.run_format`, re-exported here; this module writes, reads and
builds the trace of a run directory.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultfinder.errors import TraceFormatError
from faultfinder.redact import Redactor, redact_argv
from faultfinder.replay.canonical import canonical_reply, canonical_requests, reply_usage
from faultfinder.replay.matching import content_text, system_prompt
from faultfinder.replay.outcome import answers_match, final_answer_from_output, program_failure
from faultfinder.replay.output import replace_file
from faultfinder.replay.run_format import (
    BRANCHES_DIR,
    META_FILE,
    REPORT_FILE,
    STEPS_FILE,
    TRACE_FILE,
    Origin,
    RecordedCall,
    RunMeta,
)
from faultfinder.replay.run_scrub import rescrub_json, rescrub_steps
from faultfinder.traces.io import split_lines, write_trace
from faultfinder.traces.schema import Agent, SourceInfo, Step, ToolCall, ToolResult, Trace

__all__ = [
    "BRANCHES_DIR",
    "META_FILE",
    "REPORT_FILE",
    "STEPS_FILE",
    "TRACE_FILE",
    "Origin",
    "RecordedCall",
    "RunMeta",
    "RunStore",
    "build_trace",
    "call_to_step",
    "finish_meta",
    "load_calls",
    "new_run_id",
    "read_meta",
    "rebuild_trace",
    "redact_meta",
    "safe_child",
    "utcnow",
    "write_meta",
]


def new_run_id(prefix: str = "") -> str:
    """A sortable, unique directory name: 20261101-153012-3fa9."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}{stamp}-{secrets.token_hex(2)}"


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")


def safe_child(parent: Path, name: str) -> Path:
    """``parent/name`` for a run or branch id; refuses ids that would leave ``parent``
    (separators, '..', absolute paths, hidden names)."""
    if not _RUN_ID.match(name) or name in (".", ".."):
        raise ValueError(
            f"{name!r} is not a run id: use letters, digits, '.', '_' and '-' "
            "(no path separators; it names a directory inside the output directory)"
        )
    child = parent / name
    if child.resolve().parent != parent.resolve():
        raise ValueError(f"{name!r} names a path outside {parent}")
    return child


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunStore:
    """Appends calls to a run directory's ``steps.jsonl`` durably, in completion order.

    Everything it writes passes its :class:`Redactor` first, and is scrubbed again
    (:meth:`rescrub`) once the redactor learns a secret after it was written.
    """

    def __init__(self, directory: str | Path, redactor: Redactor | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()
        self._agent_calls: dict[str, int] = {}
        self._next_call = 0
        self.count = 0
        self.failed = 0
        # What steps.jsonl and meta.json were last scrubbed with (a generation, its secrets).
        self._scrubbed = self.redactor.generation
        self._known = frozenset(self.redactor.secrets)

    @property
    def steps_path(self) -> Path:
        return self.dir / STEPS_FILE

    def next_call_index(self) -> int:
        """Reserve the arrival number of a new call."""
        with self._lock:
            index = self._next_call
            self._next_call += 1
            return index

    def append(self, record: RecordedCall) -> RecordedCall:
        """Number the call for its agent (successful calls only) and write it durably."""
        with self._lock:
            if record.ok:
                record.agent_call = self._agent_calls.get(record.agent, 0)
                self._agent_calls[record.agent] = record.agent_call + 1
                self.count += 1
            else:
                record.agent_call = -1
                self.failed += 1
            clean = self.redactor.data(record.model_dump(mode="json", exclude_none=True))
            line = json.dumps(clean, ensure_ascii=False) + "\n"
            with self.steps_path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            self._rescrub()  # a secret this call taught may be in the calls before it
        return record

    def write_meta(self, meta: RunMeta) -> None:
        with self._lock:
            write_meta(self.dir, meta, self.redactor)
            self._rescrub()

    def rescrub(self) -> None:
        """Scrub ``steps.jsonl`` and ``meta.json`` again when the redactor has learned a
        secret since they were last scrubbed (a call may quote a key that only a later
        call's headers reveal); nothing to do otherwise. Under the lock of :meth:`append`,
        so no line is lost or written twice."""
        if self.redactor.generation == self._scrubbed:
            return
        with self._lock:
            self._rescrub()

    def _rescrub(self) -> None:
        generation, known = self.redactor.generation, frozenset(self.redactor.secrets)
        if generation == self._scrubbed:
            return
        new = known - self._known
        rescrub_steps(self.steps_path, self.redactor, new)
        rescrub_json(self.dir / META_FILE, self.redactor, new)
        # Scrubbing may teach more (a secret-named field): the next call scrubs for those.
        self._scrubbed, self._known = generation, known


def redact_meta(meta: RunMeta, redactor: Redactor) -> dict[str, Any]:
    """``meta`` as JSON data fit to write: secret arguments of the command, credentials
    in the upstream URLs and every known secret (in the paths of unrecorded requests too)
    removed."""
    data = meta.model_dump(mode="json", exclude_none=True)
    data["command"] = redact_argv(meta.command, redactor)
    for key in ("upstream", "proxy_url"):
        if data.get(key):
            data[key] = redactor.url(data[key])
    if data.get("upstreams"):
        data["upstreams"] = {api: redactor.url(url) for api, url in data["upstreams"].items()}
    # 'METHOD path' keys (a path may carry a key): scrubbed data keeps its keys as they are.
    unrecorded: dict[str, int] = {}
    for request, count in meta.unrecorded.items():
        request = redactor.text(request)
        unrecorded[request] = unrecorded.get(request, 0) + count
    data["unrecorded"] = unrecorded
    return dict(redactor.data(data))


def write_meta(directory: Path, meta: RunMeta, redactor: Redactor | None = None) -> None:
    data = redact_meta(meta, redactor or Redactor())
    replace_file(directory / META_FILE, json.dumps(data, indent=2, ensure_ascii=False))


def read_meta(directory: str | Path) -> RunMeta:
    path = Path(directory) / META_FILE
    if not path.exists():
        return RunMeta(run_id=Path(directory).name)
    try:
        return RunMeta.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TraceFormatError(
            str(path), "(json)", f"not a faultfinder run description: {exc}"
        ) from None


def load_calls(directory: str | Path, *, include_failed: bool = False) -> list[RecordedCall]:
    """The calls of a run in arrival order; a cut-short last line is skipped. A run
    directory with ``meta.json`` and no ``steps.jsonl`` (a program that made no model
    call, recorded before ``record`` created the file up front) has none."""
    path = Path(directory) / STEPS_FILE
    if not path.exists() and (Path(directory) / META_FILE).is_file():
        return []
    if not path.exists():
        raise TraceFormatError(
            str(path),
            "(file)",
            "no such file: is this a run directory written by 'faultfinder record'?",
        )
    calls: list[RecordedCall] = []
    lines = split_lines(path.read_text(encoding="utf-8"))
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            calls.append(RecordedCall.model_validate_json(line))
        except ValueError as exc:
            if number == len(lines):
                break  # the recorder was killed while writing this line
            raise TraceFormatError(str(path), f"line {number}", str(exc)) from None
    calls.sort(key=lambda c: c.call)
    return [c for c in calls if include_failed or c.ok]


def _tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    out = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        out.append(
            ToolCall(
                id=call.get("id"),
                name=str(function.get("name", "")),
                arguments=str(function.get("arguments", "")),
            )
        )
    return out


def call_to_step(index: int, call: RecordedCall, canonical: dict[str, Any] | None = None) -> Step:
    """One recorded call as a canonical step (tool results are attached later);
    ``canonical`` is its canonical request (see faultfinder.replay.canonical), computed
    here when not given (a chained request then stays unresolved)."""
    if canonical is None:
        canonical = canonical_requests([call])[0]
    reply = canonical_reply(call)
    message = reply.message if reply is not None else {}
    metadata: dict[str, Any] = {
        "call": call.call,
        "agent_call": call.agent_call,
        "agent_source": call.agent_source,
        "request_hash": call.request_hash,
        "origin": call.origin,
        "latency_s": round(call.latency_s, 4),
        "stream": call.stream,
        "api": call.api,
    }
    if reply is not None and reply.finish_reason:
        metadata["finish_reason"] = reply.finish_reason
    if reply is not None and reply.reply_id:
        metadata["reply_id"] = reply.reply_id
    if reply is not None:
        metadata.update(reply.extra)
    if call.events is not None:
        metadata["stream_events"] = len(call.events)
    if call.replay_of is not None:
        metadata["replay_of"] = call.replay_of
    if call.note:
        metadata["note"] = call.note
    request = {k: v for k, v in canonical.items() if k not in ("messages", "api")}
    return Step(
        index=index,
        agent=call.agent,
        role=str(message.get("role") or "assistant"),
        kind="llm",
        content=content_text(message.get("content")),
        input_messages=list(canonical.get("messages") or []),
        request=request,
        tool_calls=_tool_calls(message),
        model=str((reply.model if reply else None) or call.request.get("model") or "") or None,
        usage=reply_usage(reply),
        started_at=call.started_at,
        ended_at=call.ended_at,
        metadata=metadata,
    )


def _attach_tool_results(steps: list[Step]) -> None:
    # A tool's result reaches the model in a later request as a 'tool' message; it is kept
    # there, and also attached to the step that asked for it so output-only views show it.
    for position, step in enumerate(steps):
        wanted = {c.id: c for c in step.tool_calls if c.id}
        if not wanted:
            continue
        for later in steps[position + 1 :]:
            for message in later.input_messages or []:
                call_id = message.get("tool_call_id")
                if message.get("role") == "tool" and call_id in wanted:
                    step.tool_results.append(
                        ToolResult(
                            call_id=call_id,
                            name=wanted[call_id].name,
                            content=content_text(message.get("content")),
                        )
                    )
                    del wanted[call_id]
            if not wanted:
                break


def build_trace(directory: str | Path, meta: RunMeta | None = None) -> Trace:
    """The canonical trace of a run directory, from its ``steps.jsonl`` and ``meta.json``."""
    directory = Path(directory)
    meta = meta or read_meta(directory)
    has_steps = (directory / STEPS_FILE).exists()
    all_calls = load_calls(directory, include_failed=True) if has_steps else []
    calls = [c for c in all_calls if c.ok]
    canonical = canonical_requests(calls)
    steps = [call_to_step(i, c, r) for i, (c, r) in enumerate(zip(calls, canonical, strict=True))]
    _attach_tool_results(steps)
    agents: dict[str, Agent] = {}
    for call, request, step in zip(calls, canonical, steps, strict=True):
        if call.agent not in agents:
            agents[call.agent] = Agent(
                name=call.agent, system_prompt=system_prompt(request), model=step.model
            )
    task = meta.task
    if not task and calls:
        task = next(
            (
                content_text(m.get("content"))
                for m in canonical[0].get("messages") or []
                if m.get("role") == "user"
            ),
            "",
        )
    final = meta.final_answer
    if final is None and steps:
        final = steps[-1].content
    metadata: dict[str, Any] = {
        "run_dir": str(directory),
        "recorder": "faultfinder-proxy",
        "kind": meta.kind,
        "command": meta.command,
        "exit_code": meta.exit_code,
        "failed_calls": len(all_calls) - len(calls),
        "apis": sorted({c.api for c in calls}),
        "final_answer_source": "output" if meta.final_answer is not None else "last-step",
    }
    if meta.reference_steps:
        metadata["reference_steps"] = meta.reference_steps
    if meta.parent:
        metadata["parent"] = meta.parent
    if meta.replay:
        metadata["replay"] = meta.replay
    failure = program_failure(meta.exit_code, killed=meta.killed, timed_out=meta.timed_out)
    if failure is not None:
        metadata["program_failure"] = failure
    if meta.ground_truth is not None and (final is not None or failure is not None):
        # A program that failed did not solve its task, whatever answer it printed first.
        matched = final is not None and answers_match(final, meta.ground_truth)
        metadata["outcome"] = "success" if matched and failure is None else "failure"
        if failure is not None:
            metadata["outcome_reason"] = failure
    trace_id = (
        meta.run_id if meta.kind == "recording" else f"{Path(meta.parent or '').name}/{meta.run_id}"
    )
    return Trace(
        id=trace_id,
        task=task or "",
        ground_truth=meta.ground_truth,
        final_answer=final,
        system=meta.system,
        agents=list(agents.values()),
        steps=steps,
        source=SourceInfo(format="faultfinder-recording", path=str(directory)),
        metadata=metadata,
    )


def rebuild_trace(directory: str | Path) -> Trace:
    """Rebuild and write ``trace.json`` from ``steps.jsonl``; returns the trace."""
    trace = build_trace(directory)
    write_trace(trace, Path(directory) / TRACE_FILE)
    return trace


def finish_meta(meta: RunMeta, stdout_text: str | None) -> RunMeta:
    """Fill the final answer from the program's output."""
    if stdout_text and meta.final_answer is None:
        meta.final_answer = final_answer_from_output(stdout_text)
    return meta
