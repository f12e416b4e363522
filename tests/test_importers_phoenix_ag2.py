"""Phoenix span exports (REST spans, dataframe JSON lines, parquet) and AG2 runtime-log errors."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers.ag2 import Ag2Importer
from faultfinder.traces.importers.phoenix import PhoenixImporter
from faultfinder.traces.loader import load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
TID = "6c2a4f0e9b1d4e7f8a3b5c6d7e8f9012"


def rest_spans() -> list[dict[str, Any]]:
    """Phoenix REST API span objects: nested attributes, ISO times."""

    def sp(
        sid: str, parent: str | None, name: str, kind: str, t: int, attrs: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": f"U3Bhbjo{sid}",
            "name": name,
            "context": {"trace_id": TID, "span_id": sid},
            "span_kind": kind,
            "parent_id": parent,
            "start_time": f"2025-01-01T00:00:0{t}+00:00",
            "end_time": f"2025-01-01T00:00:0{t}.5+00:00",
            "status_code": "OK",
            "status_message": "",
            "attributes": attrs,
            "events": [],
        }

    def llm(text: str, tool: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": text}
        if tool:
            out["tool_calls"] = [
                {"tool_call": {"id": "t1", "function": {"name": tool, "arguments": "{}"}}}
            ]
        return {
            "llm": {
                "model_name": "m",
                "input_messages": [{"message": {"role": "user", "content": "Find the capital."}}],
                "output_messages": [{"message": out}],
                "token_count": {"prompt": 4, "completion": 2},
            }
        }

    return [
        sp("1000000000000001", None, "crew", "CHAIN", 0, {"input": {"value": "Find the capital."}}),
        sp(
            "1000000000000002",
            "1000000000000001",
            "Researcher",
            "AGENT",
            1,
            {"agent": {"name": "Researcher"}},
        ),
        sp("1000000000000003", "1000000000000002", "llm", "LLM", 2, llm("", "search")),
        sp(
            "1000000000000004",
            "1000000000000002",
            "search",
            "TOOL",
            3,
            {"tool": {"name": "search"}, "output": {"value": "Paris"}},
        ),
        sp(
            "1000000000000005",
            "1000000000000001",
            "Writer",
            "AGENT",
            4,
            {"graph": {"node": {"id": "Writer"}}},
        ),
        sp("1000000000000006", "1000000000000005", "llm", "LLM", 5, llm("Paris.")),
    ]


def check(traces: list[Any]) -> None:
    (trace,) = traces
    assert trace.source.format == "phoenix"
    assert [s.agent for s in trace.steps] == ["Researcher", "Writer"]
    assert [(r.name, r.content) for r in trace.steps[0].tool_results] == [("search", "Paris")]
    assert [c.name for c in trace.steps[0].tool_calls] == ["search"]
    assert trace.steps[1].content == "Paris." and trace.task == "Find the capital."
    assert trace.steps[1].usage is not None and trace.steps[1].usage.total_tokens == 6


def dataframe_rows() -> list[dict[str, Any]]:
    """The same spans as `get_spans_dataframe()` rows: dotted columns, epoch-ms times."""
    rows = []
    for sp in rest_spans():
        row: dict[str, Any] = {
            "name": sp["name"],
            "span_kind": sp["span_kind"],
            "parent_id": sp["parent_id"],
            "start_time": 1735689600000 + int(sp["start_time"][18]) * 1000,
            "end_time": 1735689600500 + int(sp["start_time"][18]) * 1000,
            "status_code": "OK",
            "context.span_id": sp["context"]["span_id"],
            "context.trace_id": TID,
        }
        attrs = sp["attributes"]
        if "llm" in attrs:
            llm = attrs["llm"]
            row["attributes.llm.model_name"] = llm["model_name"]
            row["attributes.llm.input_messages"] = [
                {"message.role": m["message"]["role"], "message.content": m["message"]["content"]}
                for m in llm["input_messages"]
            ]
            out = llm["output_messages"][0]["message"]
            flat = {"message.role": out["role"], "message.content": out["content"]}
            if out.get("tool_calls"):
                flat["message.tool_calls"] = [
                    {
                        "tool_call.function.name": tc["tool_call"]["function"]["name"],
                        "tool_call.id": tc["tool_call"]["id"],
                    }
                    for tc in out["tool_calls"]
                ]
            row["attributes.llm.output_messages"] = [flat]
            row["attributes.llm.token_count.prompt"] = 4
            row["attributes.llm.token_count.completion"] = 2
        for key, value in (
            ("agent", "name"),
            ("tool", "name"),
            ("output", "value"),
            ("input", "value"),
        ):
            if key in attrs:
                row[f"attributes.{key}.{value}"] = attrs[key][value]
        if "graph" in attrs:
            row["attributes.graph.node.id"] = attrs["graph"]["node"]["id"]
        rows.append(row)
    return rows


def test_rest_spans_json(tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"data": rest_spans(), "next_cursor": None}))
    assert PhoenixImporter().detect(path)
    check(load_traces(path))


def test_dataframe_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in dataframe_rows()) + "\n")
    check(load_traces(path))


def test_dataframe_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="parquet span exports need pyarrow")
    import pyarrow.parquet as pq

    rows = dataframe_rows()
    columns = sorted({k for r in rows for k in r})
    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows])
    path = tmp_path / "spans.parquet"
    pq.write_table(table, path)
    assert PhoenixImporter().detect(path)
    check(load_traces(path))


def test_a_huge_integer_in_phoenix_spans_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """A 5,000-digit integer (found by the fuzzer): the file is refused, then tried as
    objects one after another, whose decoder raised the plain ValueError Python gives for
    an integer over 4,300 digits, a traceback instead of the file's error."""
    text = json.dumps({"data": rest_spans(), "next_cursor": "@@"}).replace(
        '"@@"', "-" + "7" * 5_000
    )
    path = tmp_path / "spans.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=r"spans\.json: .*5000 digits is too large"):
        load_traces(path, format="phoenix")


def test_phoenix_record_without_ids_is_named(tmp_path: Path) -> None:
    spans = rest_spans()
    del spans[2]["context"]["span_id"]
    spans[0]["context"]["span_id"] = "x"
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(spans))
    with pytest.raises(TraceFormatError) as err:
        load_traces(path, format="phoenix")
    assert err.value.field == "[2].context.span_id"


def test_ag2_sqlite_without_chat_completions(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x)")
    assert not Ag2Importer().detect(path)
    with pytest.raises(TraceFormatError) as err:
        load_traces(path, format="ag2")
    assert err.value.field == "chat_completions"


def test_ag2_bad_request_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "runtime.db"
    shutil.copy(FIXTURES / "ag2-groupchat.db", path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE chat_completions SET request = '[1, 2]' WHERE id = 2")
    with pytest.raises(TraceFormatError) as err:
        load_traces(path)
    assert "request" in err.value.field


def test_ag2_file_log_skips_logger_noise(tmp_path: Path) -> None:
    text = (FIXTURES / "ag2-groupchat.runtime.log").read_text()
    path = tmp_path / "runtime.log"
    path.write_text("[file_logger] Failed to log new agent: boom\n" + text)
    (trace,) = load_traces(path)
    assert len(trace.steps) == 4


def _ag2_log_lines() -> list[str]:
    return (FIXTURES / "ag2-groupchat.runtime.log").read_text().splitlines(keepends=True)


def test_ag2_final_answer_needs_the_chat_to_end_on_the_last_message(tmp_path: Path) -> None:
    """The real GroupChat's file log, cut or edited: the last message is the answer only
    when the log shows the chat ended on it, by an agent that then sent no reply or by
    the message's TERMINATE."""
    lines = _ag2_log_lines()
    last_call = max(n for n, line in enumerate(lines) if '"invocation_id"' in line)
    path = tmp_path / "runtime.log"

    def final(text: str) -> tuple[str | None, str]:
        path.write_text(text)
        (trace,) = load_traces(path)
        return trace.final_answer, trace.metadata.get("final_answer_from", "")

    # cut off once the Solver's model was called, before its reply was sent: the last
    # message logged (the Planner's request) came before that call, so nothing is taken
    assert final("".join(lines[: last_call + 1])) == (None, "")
    # the manager's closing event missing: the message's TERMINATE says the chat ended
    answer, found = final("".join(lines[:-1]))
    assert answer == "The answer is 6." and found.endswith(
        "the chat ended there: it says TERMINATE"
    )
    # no TERMINATE in the text, and the manager's closing event: the chat ended there too
    answer, found = final("".join(lines).replace(" TERMINATE", ""))
    assert answer == "The answer is 6." and found.endswith("sent no reply (run_chat)")
    # neither: nothing shows the chat ended on that message
    assert final("".join(lines[:-1]).replace(" TERMINATE", "")) == (None, "")
    # only TERMINATE: AG2's summary would be empty, so there is no answer to take
    assert final("".join(lines).replace("The answer is 6. TERMINATE", "TERMINATE")) == (None, "")


def test_ag2_sqlite_final_answer_comes_from_its_events(tmp_path: Path) -> None:
    """The real SQLite log: its events carry no session id and are matched by time; with
    the last message's events gone the last one left is the Planner's request, which a
    model call followed, so there is no final answer."""
    path = tmp_path / "runtime.db"
    shutil.copy(FIXTURES / "ag2-groupchat.db", path)
    (trace,) = load_traces(path)
    assert trace.final_answer == "The answer is 6."
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM events WHERE json_state LIKE '%The answer is 6. TERMINATE%'")
    (trace,) = load_traces(path)
    assert trace.final_answer is None and "final_answer_from" not in trace.metadata


def test_span_readers_never_crash_nor_misread_under_fuzzing() -> None:
    """OTLP (envelopes included), Langfuse, Phoenix, MLflow, LangSmith and AG2 readers:
    every damaged input is refused with a TraceFormatError, flagged, or read with the
    damaged field kept verbatim — never a crash, never a silent misread."""
    from collections import Counter

    from faultfinder.testing.fuzz import SPAN_TARGETS, fuzz

    outcomes = fuzz(SPAN_TARGETS, 300, seed=11, repo=Path(__file__).resolve().parents[1])
    verdicts = Counter(o.verdict for o in outcomes)
    assert verdicts["crash"] == 0, [o for o in outcomes if o.verdict == "crash"][:5]
    assert verdicts["misread"] == 0, [o for o in outcomes if o.verdict == "misread"][:5]
    assert verdicts["error"] > 0 and verdicts["ok"] > 0


# --- long traces ----------------------------------------------------------------------------

LONG_SPANS = """
import json, sys
from pathlib import Path
from faultfinder.traces.loader import load_traces

rounds, path = int(sys.argv[1]), Path(sys.argv[2])
def span(n, name, kind, **attributes):
    return {"name": name, "span_kind": kind, "parent_id": None if n == 1 else f"{1:016x}",
            "context.trace_id": "6c2a4f0e9b1d4e7f8a3b5c6d7e8f9012",
            "context.span_id": f"{n:016x}", "status_code": "OK",
            "start_time": 1735689600000 + 10 * n, "end_time": 1735689600005 + 10 * n,
            **{f"attributes.{k}": v for k, v in attributes.items()}}
lines = [span(1, "crew", "CHAIN")]
for r in range(rounds):
    asked = [{"message.role": "user", "message.content": "Look it up."}]
    if r:  # the previous call's answer, by id
        asked.append({"message.role": "tool", "message.tool_call_id": f"call_{r - 1}",
                      "message.content": f"found {r - 1}"})
    call = {"tool_call.function.name": "search", "tool_call.id": f"call_{r}"}
    reply = {"message.role": "assistant", "message.content": "", "message.tool_calls": [call]}
    lines.append(span(2 * r + 2, "llm", "LLM", **{"llm.model_name": "m",
        "llm.input_messages": asked, "llm.output_messages": [reply]}))
    lines.append(span(2 * r + 3, "search", "TOOL", **{"tool.name": "search",
        "output.value": f"found {r}"}))  # no call id: attached by tool name
path.write_text("".join(json.dumps(line) + "\\n" for line in lines))
(trace,) = load_traces(path, format="phoenix")
print(json.dumps([[s.kind, [(r.call_id, r.content) for r in s.tool_results],
                   [e["matched_by"] for e in s.metadata["tool_spans"]]] for s in trace.steps]))
"""


@pytest.mark.slow
def test_a_long_trace_of_tool_spans_imports_in_linear_time(tmp_path: Path) -> None:
    """16,000 model calls, each asking for a tool whose span names no call id (attached by
    tool name; the id is read from the next call's input, as OpenInference's OpenAI Agents
    spans need). Each tool span copied every earlier step and every result, and each step
    read every later step's input: minutes for this trace. The child process runs with a
    generous limit."""
    rounds = 16_000
    done = subprocess.run(
        [sys.executable, "-c", LONG_SPANS, str(rounds), str(tmp_path / "spans.jsonl")],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")},
    )  # fmt: skip
    steps = json.loads(done.stdout)
    assert len(steps) == rounds
    assert steps[0] == ["llm", [["call_0", "found 0"]], ["tool name"]]
    assert steps[-2] == ["llm", [[f"call_{rounds - 2}", f"found {rounds - 2}"]], ["tool name"]]
    # the last call's id is in no later input
    assert steps[-1] == ["llm", [[None, f"found {rounds - 1}"]], ["tool name"]]
