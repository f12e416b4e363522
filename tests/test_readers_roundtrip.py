"""Readers read what writers wrote: any text survives write → read, whatever line
separators (U+2028, U+2029, U+0085...) it holds. JSON writers leave those unescaped, so a
reader that splits lines with str.splitlines() cuts records in two."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultfinder.cli.import_cmd import write_jsonl
from faultfinder.replay.recorder import STEPS_FILE, RecordedCall, load_calls
from faultfinder.traces.io import read_jsonl, split_lines, write_trace
from faultfinder.traces.loader import load_trace, load_traces
from faultfinder.traces.schema import GoldLabel, Step, Trace

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEPARATORS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r"
# Any Unicode text, with line separators made frequent; no lone surrogates (not text).
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(SEPARATORS + '\n\t "\\{}'),
        st.characters(exclude_categories=("Cs",)),
    ),
    max_size=40,
)
NAME = TEXT.filter(lambda s: s.strip() == s and s != "")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_split_lines_splits_on_newline_only() -> None:
    assert split_lines("a\u2028b\u2029c\u0085d\x0ce\r\nf\n") == [
        "a\u2028b\u2029c\u0085d\x0ce",
        "f",
        "",
    ]


@FAST
@given(texts=st.lists(TEXT, min_size=1, max_size=5))
def test_jsonl_lines_round_trip(tmp_path_factory: object, texts: list[str]) -> None:
    path = Path(tmp_path_factory.mktemp("rt")) / "x.jsonl"  # type: ignore[attr-defined]
    path.write_text(
        "\n".join(json.dumps({"t": t}, ensure_ascii=False) for t in texts) + "\n",
        encoding="utf-8",
    )
    assert [value["t"] for _, value in read_jsonl(path)] == texts


def _trace(trace_id: str, task: str, contents: list[str], agents: list[str]) -> Trace:
    steps = [
        Step(index=i, agent=agents[i % len(agents)], content=c) for i, c in enumerate(contents)
    ]
    return Trace(
        id=trace_id,
        task=task,
        steps=steps,
        label=GoldLabel(agent=agents[0], step=len(steps) - 1, reason=task),
        metadata={"note": task},
    )


@FAST
@given(
    task=TEXT,
    contents=st.lists(TEXT, min_size=1, max_size=4),
    agents=st.lists(NAME, min_size=1, max_size=3),
)
def test_canonical_traces_round_trip(
    tmp_path_factory: object, task: str, contents: list[str], agents: list[str]
) -> None:
    tmp = Path(tmp_path_factory.mktemp("rt"))  # type: ignore[attr-defined]
    traces = [_trace("a", task, contents, agents), _trace("b", task[::-1], contents, agents)]
    write_jsonl(traces, tmp / "all.jsonl")
    assert load_traces(tmp / "all.jsonl") == traces
    write_trace(traces[0], tmp / "one.json")
    assert load_trace(tmp / "one.json") == traces[0]


@FAST
@given(contents=st.lists(TEXT, min_size=1, max_size=4), agents=st.lists(NAME, min_size=1))
def test_generic_jsonl_import_keeps_every_character(
    tmp_path_factory: object, contents: list[str], agents: list[str]
) -> None:
    path = Path(tmp_path_factory.mktemp("rt")) / "chat.jsonl"  # type: ignore[attr-defined]
    messages = [
        {"role": "assistant", "name": agents[i % len(agents)], "content": c}
        for i, c in enumerate(contents)
    ]
    path.write_text(
        "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages), encoding="utf-8"
    )
    trace = load_trace(path, format="generic")
    assert [s.content for s in trace.steps] == contents
    assert [s.agent for s in trace.steps] == [m["name"] for m in messages]


@FAST
@given(question=TEXT, contents=st.lists(TEXT, min_size=1, max_size=4), agent=NAME)
def test_who_and_when_import_keeps_every_character(
    tmp_path_factory: object, question: str, contents: list[str], agent: str
) -> None:
    path = Path(tmp_path_factory.mktemp("rt")) / "1.json"  # type: ignore[attr-defined]
    data = {
        "question": question,
        "history": [{"role": "assistant", "name": agent, "content": c} for c in contents],
        "mistake_agent": agent,
        "mistake_step": str(len(contents) - 1),
        "mistake_reason": question,
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    trace = load_trace(path, format="who-and-when")
    assert trace.task == question
    assert [s.content for s in trace.steps] == contents
    assert trace.label is not None and trace.label.agent == agent.strip()
    assert trace.label.reason == question


@FAST
@given(contents=st.lists(TEXT, min_size=1, max_size=3))
def test_recorded_steps_read_back(tmp_path_factory: object, contents: list[str]) -> None:
    run = Path(tmp_path_factory.mktemp("run"))  # type: ignore[attr-defined]
    lines = []
    for i, text in enumerate(contents):
        call = RecordedCall(
            call=i,
            agent="a",
            request_hash=f"h{i}",
            started_at=NOW,
            ended_at=NOW,
            request={"messages": [{"role": "user", "content": text}]},
            response={"choices": [{"message": {"role": "assistant", "content": text}}]},
        )
        lines.append(json.dumps(call.model_dump(mode="json"), ensure_ascii=False))
    (run / STEPS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    calls = load_calls(run)
    assert [c.request["messages"][0]["content"] for c in calls] == contents
