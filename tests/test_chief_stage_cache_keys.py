"""CHIEF's stage cache never gives one model's entry to another: a test double without
an import path (a closure, a callable object) is keyed by a name no other object gets,
not by ``id()``, which Python hands on to the next object once one is freed (two tests
read each other's graphs, and failed by the order they ran in). The default directory
follows ``$FAULTFINDER_CHIEF_STAGES``, so the suite writes none into the working tree,
and a model with an import path keeps the key it had."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.methods.chief import ChiefConfig
from faultfinder.methods.chief.config import DEFAULT_STAGE_CACHE
from faultfinder.methods.chief.pipeline import Chief
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace

FIXTURES = Path(__file__).parent / "fixtures" / "chief"
REPLIES: dict[str, Any] = json.loads((FIXTURES / "replies_loop.json").read_text("utf-8"))
TRACE = FIXTURES / "loop_trace.json"


class Judge:
    """A callable test double: CHIEF's scripted stages, counting what it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request: ChatRequest) -> str:
        text = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        stage = stage_of(text)
        self.asked.append(stage)
        reply = REPLIES.get(stage, "")
        return reply if isinstance(reply, str) else json.dumps(reply)


def module_judge(request: ChatRequest) -> str:
    return Judge()(request)


def _run_once(directory: Path) -> tuple[dict[str, str], list[str]]:
    judge = Judge()
    method = create_method("chief:M1", stage_cache=str(directory))
    result = asyncio.run(run_method(method, load_trace(TRACE), LLM(FunctionBackend(judge))))
    return dict(result.details["stage_cache"]), judge.asked


def test_a_new_test_double_never_reads_a_freed_ones_entries(tmp_path: Path) -> None:
    first, asked = _run_once(tmp_path)
    assert first == {"graph": "miss"} and "decompose" in asked
    for _ in range(5):
        gc.collect()  # the last judge is gone: its id() is free for the next one
        again, asked = _run_once(tmp_path)
        assert again == {"graph": "miss"} and "decompose" in asked


def test_the_default_directory_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, stages = tmp_path / "work", tmp_path / "stages"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FAULTFINDER_CHIEF_STAGES", str(stages))
    method = create_method("chief:M1")
    assert method.config.stage_cache == DEFAULT_STAGE_CACHE  # the config (and its id) is unchanged
    asyncio.run(run_method(method, load_trace(TRACE), LLM(FunctionBackend(module_judge))))
    assert [p.name.split("-")[0] for p in stages.iterdir()] == ["graph"]
    assert list(work.iterdir()) == []


def test_a_model_with_an_import_path_keeps_one_key_across_instances() -> None:
    trace, config = load_trace(TRACE), ChiefConfig()
    keys = {Chief(trace, LLM(FunctionBackend(module_judge)), config)._graph_key() for _ in "ab"}
    assert len(keys) == 1
