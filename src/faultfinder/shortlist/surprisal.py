"""Token surprisal of each step's output under the embedded model, from prefill alone.

The log is laid out as one token stream, ``\\n<speaker>: <output>`` per step, each
output cut to its first ``max_step_tokens`` tokens (long tool dumps would otherwise
dominate the cost). The stream is evaluated in windows of ``window`` tokens that overlap
by ``overlap`` tokens of context, so every scored token sees at least that much of the
log before it. A token's surprisal is ``-log p(token | preceding tokens)`` in nats; a
step gets the mean and the max over its output's tokens. No token is generated.

Results are cached on disk (``.faultfinder/surprisal/``, git-ignored) under the trace's
content hash and the scorer's settings, because the prefill is the slow part.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from faultfinder.shortlist.model import trace_hash
from faultfinder.traces.schema import Trace

DEFAULT_CACHE = Path(".faultfinder") / "surprisal"


class SurprisalScorer(Protocol):
    """Per-step (mean, max) token surprisal of a trace."""

    def identity(self) -> str:
        """Settings that change the numbers (model file, windows): part of the cache key."""
        ...

    def score(self, trace: Trace) -> list[tuple[float, float]]:
        """One (mean, max) pair in nats per step; (0, 0) for a step with no tokens."""
        ...


@dataclass
class LlamaSurprisal:
    """Surprisal from the embedded SmolLM2 (llama-cpp-python, CPU)."""

    max_step_tokens: int = 32
    """Tokens of each step's output that are scored (and kept as context)."""
    window: int = 256
    """Tokens evaluated per llama.cpp pass."""
    overlap: int = 64
    """Tokens of preceding context repeated at the start of each window after the first."""
    n_threads: int | None = None
    """CPU threads; None lets llama.cpp decide."""

    def __post_init__(self) -> None:
        if not 0 <= self.overlap < self.window - 1:
            raise ValueError("overlap must be at least 0 and smaller than window - 1")
        self._llama: Any = None
        self._path: Path | None = None

    def _model(self) -> Any:
        if self._llama is None:
            from faultfinder.llm.local import _require_llama_cpp, find_weights

            _require_llama_cpp()
            import llama_cpp

            self._path = find_weights()
            kwargs: dict[str, Any] = {}
            if self.n_threads:
                kwargs["n_threads"] = self.n_threads
            self._llama = llama_cpp.Llama(
                model_path=str(self._path),
                n_ctx=self.window,
                n_batch=self.window,
                logits_all=True,
                verbose=False,
                **kwargs,
            )
        return self._llama

    def identity(self) -> str:
        from faultfinder.llm.local import find_weights

        weights = find_weights().name
        return f"{weights}:{self.max_step_tokens}:{self.window}:{self.overlap}"

    def _stream(self, trace: Trace) -> tuple[list[int], list[int]]:
        """Token ids of the laid-out log and, per token, its step (-1: not scored)."""
        llama = self._model()
        tokens: list[int] = [llama.token_bos()]
        owner: list[int] = [-1]
        for step in trace.steps:
            head = llama.tokenize(f"\n{step.speaker}: ".encode(), add_bos=False, special=False)
            body = llama.tokenize(step.content.encode("utf-8"), add_bos=False, special=False)
            body = body[: self.max_step_tokens]
            tokens += head + body
            owner += [-1] * len(head) + [step.index] * len(body)
        return tokens, owner

    def token_surprisal(self, tokens: Sequence[int]) -> list[float]:
        """Surprisal of tokens[1:], windowed (the first token has none)."""
        import numpy as np

        llama = self._model()
        out: list[float] = []
        start = 0  # first token whose surprisal the next window reports
        while len(tokens) > 1 and start < len(tokens):
            # At least one preceding token, so the window's first scored token has context.
            ctx_from = max(0, start - max(self.overlap, 1)) if start else 0
            chunk = list(tokens[ctx_from : ctx_from + self.window])
            llama.reset()
            llama.eval(chunk)
            logits = np.asarray(llama.scores[: len(chunk)], dtype=np.float64)
            top = logits.max(axis=1, keepdims=True)
            lse = (top[:, 0] + np.log(np.exp(logits - top).sum(axis=1)))[:-1]
            picked = logits[np.arange(len(chunk) - 1), chunk[1:]]
            nll = (lse - picked).tolist()  # surprisal of chunk[1:]
            # chunk[j] is tokens[ctx_from + j]; report tokens from max(start, 1) on.
            first = max(start, 1) - ctx_from - 1
            out += nll[first:]
            start = ctx_from + len(chunk)
        return out

    def score(self, trace: Trace) -> list[tuple[float, float]]:
        tokens, owner = self._stream(trace)
        nll = self.token_surprisal(tokens)
        per_step: list[list[float]] = [[] for _ in trace.steps]
        for value, step in zip(nll, owner[1:], strict=True):
            if step >= 0:
                per_step[step].append(value)
        return [(sum(v) / len(v), max(v)) if v else (0.0, 0.0) for v in per_step]


class CachedSurprisal:
    """Wraps a scorer with an on-disk cache keyed by trace content and scorer identity."""

    def __init__(self, scorer: SurprisalScorer, folder: Path = DEFAULT_CACHE) -> None:
        self.scorer = scorer
        self.folder = folder
        self.seconds: dict[str, float] = {}
        """Wall time of each trace actually scored (cache misses), by trace id."""

    def identity(self) -> str:
        return self.scorer.identity()

    def _path(self, trace: Trace) -> Path:
        import hashlib

        ident = hashlib.sha256(self.scorer.identity().encode()).hexdigest()[:10]
        return self.folder / ident / f"{trace_hash(trace)}.json"

    def score(self, trace: Trace) -> list[tuple[float, float]]:
        path = self._path(trace)
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if len(data["steps"]) == len(trace.steps):
                return [(float(a), float(b)) for a, b in data["steps"]]
        started = time.process_time()
        values = self.scorer.score(trace)
        spent = time.process_time() - started
        self.seconds[trace.id] = spent
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"identity": self.scorer.identity(), "cpu_s": spent, "steps": values}
        path.write_text(json.dumps(payload), encoding="utf-8")
        return values

    def cpu_seconds(self, trace: Trace) -> float | None:
        """CPU seconds the trace's scoring took when it was computed (cached or not)."""
        path = self._path(trace)
        if not path.is_file():
            return None
        return float(json.loads(path.read_text(encoding="utf-8")).get("cpu_s", 0.0))
