"""Fixes from an audit of the model layer: a locked cache is waited on and reported, never
set aside as corrupt; `--cache` naming a directory or an impossible path is one line; a
model that raises is a recorded `error` (exit 4) in `attribute` as in `eval`; a test
double's reply of the wrong shape is one line naming it; the call-budget message counts
the calls in flight."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import BudgetExceededError, ConfigError, FaultfinderWarning
from faultfinder.eval.rows import read_rows
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict, run_method
from faultfinder.llm import ChatRequest
from faultfinder.llm.base import Completion
from faultfinder.llm.cache import ResponseCache, cache_key
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend
from faultfinder.llm.limits import BudgetBook
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from faultfinder.usage import Budget

HERE = Path(__file__).parent
TINY = HERE / "fixtures" / "core" / "tiny_trace.json"
FIXTURE = HERE / "fixtures" / "eval" / "traces.jsonl"
MODULE = Path(__file__).stem
REQUEST = ChatRequest(messages=[{"role": "user", "content": "q"}])


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


# Function models for the CLI (imported by name from this module).


def answer(request: ChatRequest) -> str:
    return "Agent Name: X\nStep Number: 0\nReason for Mistake: because"


def boom(request: ChatRequest) -> str:
    raise RuntimeError("kaboom")


def none(request: ChatRequest) -> None:
    return None


def leaky(request: ChatRequest) -> str:
    raise RuntimeError(
        "refused key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX at https://api.example/v1?api_key=s3cr3tvalue"
    )


def _filled_cache(path: Path) -> None:
    cache = ResponseCache(path)
    cache.put(cache_key({"b": 1}, REQUEST), REQUEST, Completion(text="a"))
    cache.close()


def _no_aside(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if ".corrupt-" in p.name]


# --- 1. a locked cache is waited on, then reported; never moved aside --------------------


def test_a_locked_cache_is_reported_after_the_wait_and_left_in_place(tmp_path: Path) -> None:
    path = tmp_path / "lk.sqlite"
    _filled_cache(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FaultfinderWarning)  # no "moved it" warning
            with pytest.raises(ConfigError, match=r"locked by another process \(waited 0.3 s\)"):
                ResponseCache(path, lock_wait=0.3)
        assert time.monotonic() - started >= 0.25  # it did wait
    finally:
        holder.execute("COMMIT")
        holder.close()
    _no_aside(tmp_path)
    cache = ResponseCache(path)
    assert len(cache) == 1  # the entry is still there
    cache.close()


def test_a_lock_released_within_the_wait_is_no_error(tmp_path: Path) -> None:
    path = tmp_path / "lk.sqlite"
    _filled_cache(path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        time.sleep(0.3)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    try:
        cache = ResponseCache(path, lock_wait=10)
    finally:
        thread.join()
    assert cache.get(cache_key({"b": 1}, REQUEST)) is not None
    cache.close()
    _no_aside(tmp_path)


def test_a_database_that_is_not_damaged_is_never_set_aside(tmp_path: Path) -> None:
    # A healthy SQLite file of something else (newer schema, no 'responses' table): an
    # error that is not corruption leaves it alone.
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE mine (x)")
    db.execute("PRAGMA user_version = 9")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match=r"cannot be used .*no such table"):
        ResponseCache(path)
    _no_aside(tmp_path)
    assert sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall() == [("mine",)]


# --- 2. --cache naming a directory or an impossible path ---------------------------------


def test_a_directory_given_as_the_cache_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / ".faultfinder"
    folder.mkdir()
    (folder / "results.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="is a directory"):
        ResponseCache(folder)
    assert (folder / "results.jsonl").read_text() == "{}\n"
    _no_aside(tmp_path)


@pytest.mark.parametrize("where", ["directory", "file-in-the-way", "proc"])
def test_attribute_with_an_unusable_cache_path_says_so_in_one_line(
    tmp_path: Path, where: str
) -> None:
    if where == "directory":
        cache = tmp_path / ".faultfinder"
        cache.mkdir()
        (cache / "results.jsonl").write_text("{}\n")
        expected = "is a directory"
    elif where == "file-in-the-way":
        (tmp_path / "afile").write_text("x")
        cache = tmp_path / "afile" / "c.sqlite"
        expected = "a file is in the way"
    else:
        cache = Path("/proc/nope/c.sqlite")
        expected = "cannot create its folder /proc/nope"
    code, out, err = invoke(
        "attribute", TINY, "--model", f"function:{MODULE}:answer", "--cache", cache, "--no-save"
    )
    assert code == 1, err
    assert err.startswith("Error: ") and expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out
    _no_aside(tmp_path)
    if where == "directory":
        assert (cache / "results.jsonl").read_text() == "{}\n"


# --- 3. a model (or method) that raises is a recorded error ------------------------------


class _RaisingConfig(MethodConfig):
    pass


class _RaisingMethod(MethodBase):
    name: ClassVar[str] = "audit-raising"
    summary: ClassVar[str] = "raises a plain bug"
    Config: ClassVar[type[MethodConfig]] = _RaisingConfig
    needs_model: ClassVar[bool] = False

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        raise KeyError("boom")


def test_run_method_records_any_exception_as_an_error() -> None:
    trace = load_traces(TINY)[0]
    llm = LLM(FunctionBackend(answer))
    result = asyncio.run(run_method(_RaisingMethod(_RaisingConfig()), trace, llm))
    assert result.status == "error"
    assert result.error == "KeyError: 'boom'"
    assert result.agent is None and result.step is None


def test_a_reply_s_usage_is_the_call_s_usage_and_is_checked() -> None:
    trace = load_traces(TINY)[0]
    said = "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: wrong sum"
    usage = {"prompt_tokens": 70, "completion_tokens": 9}
    llm = LLM(FunctionBackend(lambda r: {"text": said, "usage": usage}))
    result = asyncio.run(run_method(create_method("all-at-once"), trace, llm))
    assert (result.status, result.agent, result.step) == ("ok", "Calculator", 2)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (70, 9)
    assert not result.usage.estimated
    for bad in ({"prompt": 1}, {"prompt_tokens": -1}, {"prompt_tokens": "9"}, [1]):
        llm = LLM(FunctionBackend(lambda r, bad=bad: {"text": said, "usage": bad}))
        failed = asyncio.run(run_method(create_method("all-at-once"), trace, llm))
        assert failed.status == "error" and '"usage"' in (failed.error or "")


def test_an_error_text_holding_a_key_is_written_without_it(tmp_path: Path) -> None:
    out_file = tmp_path / "rows.jsonl"
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once", "--model", f"function:{MODULE}:leaky",
        "--cache", "none", "--no-progress", "--out", out_file,
    )  # fmt: skip
    assert code == 4, err
    written = out_file.read_text("utf-8")
    assert "RuntimeError: refused key [REDACTED]" in written
    assert "sk-proj-ABCDEF" not in written and "s3cr3tvalue" not in written


def test_attribute_with_a_raising_model_prints_the_error_and_exits_4(tmp_path: Path) -> None:
    code, out, err = invoke(
        "attribute", TINY, "--model", f"function:{MODULE}:boom", "--cache", "none", "--no-save"
    )
    assert code == 4, err
    assert "status:     error  (RuntimeError: kaboom)" in out
    assert "exit 4: of 1 case, 1 errored" in err
    assert "Traceback" not in out + err


def test_attribute_and_eval_record_a_raising_model_alike(tmp_path: Path) -> None:
    code, out, err = invoke(
        "attribute", TINY, "--model", f"function:{MODULE}:boom", "--cache", "none",
        "--no-save", "--json",
    )  # fmt: skip
    assert code == 4, err
    attributed = json.loads(out)
    rows_path = tmp_path / "r.jsonl"
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once", "--model", f"function:{MODULE}:boom",
        "--cache", "none", "--no-progress", "--out", rows_path,
    )  # fmt: skip
    assert code == 4, err
    rows = read_rows(rows_path)
    assert rows and {r.status for r in rows} == {"error"}
    assert {r.error for r in rows} == {attributed["error"]} == {"RuntimeError: kaboom"}


# --- 4. a test double's reply of the wrong shape ------------------------------------------


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (None, "reply is None;"),
        (42, "reply is 42 (int);"),
        ({"text": 5}, 'has "text" 5 (int), not a string'),
        ({"txt": "a"}, "unknown key 'txt' (did you mean 'text'?)"),
        ({"tool_calls": "lookup"}, "has \"tool_calls\" 'lookup' (str), not a list"),
        ({"tool_calls": [{"arguments": {}}]}, 'tool call 1 without a "name" string'),
        ({"tool_calls": [{"name": "f", "args": {}}]}, "tool call 1 with an unknown key 'args'"),
        (
            {"tool_calls": [{"name": "f", "arguments": {1, 2}}]},
            '"arguments" {1, 2} (set), not JSON',
        ),
    ],
)
def test_a_function_reply_of_the_wrong_shape_is_one_clear_error(reply: Any, said: str) -> None:
    backend = FunctionBackend(lambda request: reply, model="mine")
    with pytest.raises(ConfigError) as caught:
        asyncio.run(backend.complete(REQUEST))
    message = str(caught.value)
    assert message.startswith("function:mine: reply ")
    assert said in message
    assert 'expected a string, a {"text", "tool_calls", "usage"} object or a Completion' in message


def test_replies_of_every_documented_shape_still_work() -> None:
    replies: list[Any] = [
        "plain",
        {"text": "t"},
        {},
        {"tool_calls": [{"name": "f", "arguments": {"q": 1}}]},
        {"text": "", "tool_calls": [{"id": "c9", "name": "g", "arguments": '{"a": 2}'}]},
        Completion(text="whole"),
    ]
    backend = ScriptedBackend(replies)
    got = [asyncio.run(backend.complete(REQUEST)) for _ in replies]
    assert [c.text for c in got] == ["plain", "t", "", "", "", "whole"]
    assert got[3].tool_calls[0].arguments == '{"q": 1}' and got[3].tool_calls[0].id == "call_0"
    assert got[4].tool_calls[0].id == "c9" and got[4].finish_reason == "tool_calls"


def test_a_scripted_reply_of_the_wrong_shape_fails_before_any_call() -> None:
    with pytest.raises(ConfigError, match=r'scripted: reply 2 has "text" 5 \(int\)'):
        ScriptedBackend(["fine", {"text": 5}])


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ({"replies": [{"text": 5}]}, 'reply 1 has "text" 5 (int), not a string'),
        ({"replies": [{"txt": "a"}]}, "reply 1 has an unknown key 'txt' (did you mean 'text'?)"),
        ({"replies": ["a"], "repeat_lst": True}, "unknown key 'repeat_lst' (did you mean"),
        ({"replies": ["a"], "repeat_last": "yes"}, "\"repeat_last\" is 'yes' (str)"),
        (["a", None], "reply 2 is None"),
    ],
)
def test_attribute_with_a_bad_scripted_file_is_one_line(
    tmp_path: Path, content: Any, said: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(content))
    code, out, err = invoke(
        "attribute", TINY, "--model", f"scripted:{path}", "--cache", "none", "--no-save"
    )
    assert code == 1, err
    assert err.startswith("Error: ") and said in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in out + err


def test_attribute_with_a_function_returning_none_names_the_bad_reply() -> None:
    code, out, err = invoke(
        "attribute", TINY, "--model", f"function:{MODULE}:none", "--cache", "none", "--no-save"
    )
    assert code == 4, err
    assert f"function:{MODULE}:none: reply is None; expected a string" in out
    assert "Traceback" not in out + err and "AttributeError" not in out + err


# --- 5. the call budget counts calls in flight --------------------------------------------


def test_the_call_budget_message_counts_calls_in_flight() -> None:
    book = BudgetBook(Budget(max_calls=3))
    book.reserve(10)
    book.settle(10, 5, called=True)
    book.reserve(10)
    book.reserve(10)
    with pytest.raises(BudgetExceededError) as caught:
        book.reserve(10)
    assert "Call budget of 3 reached (1 call made, 2 in flight)" in str(caught.value)
    book.settle(10, 5, called=True)
    book.settle(10, 5, called=True)
    with pytest.raises(BudgetExceededError, match=r"reached \(3 calls made\)\."):
        book.reserve(10)


def test_the_token_budget_message_counts_tokens_held_in_flight() -> None:
    book = BudgetBook(Budget(max_tokens=100))
    book.reserve(60)
    with pytest.raises(BudgetExceededError) as caught:
        book.reserve(50)
    assert "0 spent, 60 held by calls in flight, next call may need up to 50" in str(caught.value)
