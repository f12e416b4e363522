"""The decomposition knowledge base: JSONL of {task, solution steps}, and retrieval over it.

Lexical retrieval (Okapi BM25, written here) is the default; embeddings are an option
(an OpenAI-compatible embeddings endpoint, or sentence-transformers when installed).
Entries from the trace's own task are always excluded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from faultfinder.errors import ConfigError, ModelNotAvailableError, ModelRequestsForbiddenError
from faultfinder.llm import base as llm_base
from faultfinder.llm import json_text
from faultfinder.traces.io import split_lines
from faultfinder.traces.schema import Trace

BUILTIN = "builtin"
"""Name of the small example knowledge base shipped with the package."""

Retrieval = Literal["bm25", "embeddings"]


class KBEntry(BaseModel):
    """One solved task and its solution steps."""

    id: str
    """Entry id; entries whose id equals the trace's task id are never retrieved."""
    task: str
    """The task statement."""
    steps: list[str]
    """Solution steps in order."""
    source: str = ""
    """Where the entry comes from (free text)."""

    def text(self) -> str:
        """The retrievable text: task plus steps (the paper's '{Question} + {Steps}')."""
        return self.task + "\n" + "\n".join(self.steps)

    def prompt_text(self) -> str:
        numbered = "\n".join(f"{i}. {s}" for i, s in enumerate(self.steps, start=1))
        source = f"Source: {self.source}\n" if self.source else ""
        return f"{source}Task: {self.task}\nSteps:\n{numbered}"


class KnowledgeBase(BaseModel):
    """A loaded knowledge base."""

    name: str
    """'builtin' or the file path."""
    entries: list[KBEntry] = Field(default_factory=list)
    """Entries in file order."""

    def fingerprint(self) -> str:
        blob = json.dumps([e.model_dump() for e in self.entries], sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def load_knowledge_base(spec: str) -> KnowledgeBase:
    """Read 'builtin' or a JSONL file. Each line: {"id"?, "task", "steps", "source"?}.

    ``steps`` may be a list of strings or one string (split into lines); ``question``,
    ``solution`` and ``explanation`` are accepted as aliases.
    """
    if spec == BUILTIN:
        text = (resources.files(__package__) / "kb_example.jsonl").read_text(encoding="utf-8")
        name = BUILTIN
    else:
        path = Path(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(
                f"Knowledge base not found: {path}. Point knowledge_base at a JSONL file of "
                '{"task": ..., "steps": [...]} lines, or use "builtin".'
            ) from None
        name = str(path)
    entries: list[KBEntry] = []
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            raw = json_text.loads(line)
        except json_text.JSONTextError as exc:
            raise ConfigError(f"{name}:{number}: invalid JSON: {exc}") from None
        entries.append(_entry(raw, f"{name}:{number}", default_id=f"kb-{number}"))
    return KnowledgeBase(name=name, entries=entries)


def _entry(raw: Any, where: str, default_id: str) -> KBEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object with 'task' and 'steps'")
    task = raw.get("task") or raw.get("question")
    steps = raw.get("steps") or raw.get("solution") or raw.get("explanation")
    if not isinstance(task, str) or not task.strip():
        raise ConfigError(f"{where}: field 'task' is missing or empty")
    if isinstance(steps, str):
        steps = [s.strip() for s in split_lines(steps) if s.strip()]
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
        raise ConfigError(f"{where}: field 'steps' must be a non-empty list of strings")
    return KBEntry(
        id=str(raw.get("id") or default_id),
        task=task.strip(),
        steps=[re.sub(r"^\s*\d+[.)]\s*", "", s).strip() for s in steps],
        source=str(raw.get("source") or ""),
    )


# --- exclusion ----------------------------------------------------------------

_TASK_ID_KEYS = ("question_ID", "question_id", "task_id", "taskId", "task_ID")


def task_ids(trace: Trace) -> set[str]:
    """Identifiers under which the trace's task may appear in a knowledge base."""
    ids = {trace.id}
    for key in _TASK_ID_KEYS:
        value = trace.metadata.get(key)
        if value:
            ids.add(str(value))
    return ids


def _norm_text(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def excluded_entries(kb: KnowledgeBase, trace: Trace) -> list[str]:
    """Entries from this trace's own task: same id, or the same task text."""
    ids = task_ids(trace)
    task = _norm_text(trace.task)
    return [e.id for e in kb.entries if e.id in ids or (task and _norm_text(e.task) == task)]


# --- BM25 ---------------------------------------------------------------------

_STOPWORD_TEXT = (
    "a an the of to in on at for and or but is are was were be been being by with from as "
    "that this these those it its into than then there their they them what which who whom "
    "how when where why do does did can could should would will shall may might must i you "
    "he she we me my your our his her not no yes if so such all any each"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords."""
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOPWORDS]


class BM25:
    """Okapi BM25 over a fixed list of documents."""

    def __init__(self, documents: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.docs = [Counter(tokenize(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg_length = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        # The +1 inside the log keeps idf positive for terms in most documents.
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out: list[float] = []
        for doc, length in zip(self.docs, self.lengths, strict=True):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / (self.avg_length or 1.0))
            for t in terms:
                tf = doc.get(t, 0)
                if tf:
                    score += self.idf[t] * tf * (self.k1 + 1) / (tf + norm)
            out.append(score)
        return out


# --- embeddings ---------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into vectors."""

    name: str
    """Identifies the embedding model (part of cache keys)."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        ...


class OpenAIEmbedder:
    """An OpenAI-compatible /embeddings endpoint."""

    def __init__(self, model: str, *, base_url: str | None, api_key_env: str) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.name = f"openai:{model}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not llm_base.ALLOW_MODEL_REQUESTS:
            raise ModelRequestsForbiddenError(self.name)
        from openai import OpenAI

        client = OpenAI(
            base_url=self.base_url, api_key=os.environ.get(self.api_key_env) or "not-set"
        )
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 64):
            reply = client.embeddings.create(model=self.model, input=texts[start : start + 64])
            vectors.extend(list(item.embedding) for item in reply.data)
        return vectors


class SentenceTransformerEmbedder:
    """A locally installed sentence-transformers model (weights must already be on disk)."""

    def __init__(self, model: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ModelNotAvailableError(
                "sentence-transformers is not installed: install it, or use "
                "embedding_model='openai:MODEL', or retrieval='bm25'."
            ) from None
        self._model = SentenceTransformer(model)
        self.name = f"st:{model}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self._model.encode(texts)]


def make_embedder(spec: str, *, base_url: str | None, api_key_env: str) -> Embedder:
    """'openai:MODEL' or 'st:MODEL' (sentence-transformers)."""
    kind, _, model = spec.partition(":")
    if kind == "openai" and model:
        return OpenAIEmbedder(model, base_url=base_url, api_key_env=api_key_env)
    if kind in ("st", "sentence-transformers") and model:
        return SentenceTransformerEmbedder(model)
    raise ConfigError(
        f"embedding_model '{spec}': use 'openai:MODEL' (an OpenAI-compatible embeddings "
        "endpoint, --set embedding_base_url=...) or 'st:MODEL' (sentence-transformers)."
    )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


_EMBEDDING_MEMO: dict[tuple[str, str], list[list[float]]] = {}


# --- retrieval ----------------------------------------------------------------


class Retrieved(BaseModel):
    """Retrieval outcome."""

    entries: list[KBEntry] = Field(default_factory=list)
    """Chosen exemplars, best first."""
    scores: list[float] = Field(default_factory=list)
    """Their scores."""
    excluded: list[str] = Field(default_factory=list)
    """Entries excluded as coming from the trace's own task."""


def retrieve(
    kb: KnowledgeBase,
    trace: Trace,
    *,
    k: int = 2,
    retrieval: Retrieval = "bm25",
    embedder: Embedder | None = None,
    embedder_factory: Callable[[], Embedder] | None = None,
) -> Retrieved:
    """The ``k`` entries most similar to the trace's task, own-task entries excluded.

    Entries scoring zero (no shared term) are not returned: an unrelated exemplar is worse
    than none.
    """
    excluded = set(excluded_entries(kb, trace))
    pool = [e for e in kb.entries if e.id not in excluded]
    if not pool or k <= 0:
        return Retrieved(excluded=sorted(excluded))
    if retrieval == "bm25":
        scores = BM25([e.text() for e in pool]).scores(trace.task)
    else:
        model = embedder or (embedder_factory() if embedder_factory else None)
        if model is None:
            raise ConfigError("retrieval='embeddings' needs embedding_model (e.g. openai:MODEL)")
        memo_key = (model.name, kb.fingerprint() + ":" + ",".join(e.id for e in pool))
        if memo_key not in _EMBEDDING_MEMO:
            _EMBEDDING_MEMO[memo_key] = model.embed([e.text() for e in pool])
        query = model.embed([trace.task])[0]
        scores = [_cosine(query, v) for v in _EMBEDDING_MEMO[memo_key]]
    ranked = sorted(range(len(pool)), key=lambda i: (-scores[i], i))
    chosen = [i for i in ranked if scores[i] > 0][:k]
    return Retrieved(
        entries=[pool[i] for i in chosen],
        scores=[round(scores[i], 4) for i in chosen],
        excluded=sorted(excluded),
    )
