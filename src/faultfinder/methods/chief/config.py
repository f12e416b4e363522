"""CHIEF's configuration."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from faultfinder.judging.method import MethodConfig
from faultfinder.methods.chief.prompts import PROMPT_VERSION, Layout

Modules = Literal["M1", "M1+M2", "M1+M3", "full"]

DEFAULT_STAGE_CACHE = ".faultfinder/chief-stages"


class ChiefConfig(MethodConfig):
    """Options of the CHIEF method (paper defaults unless noted in docs/methods/chief.md)."""

    PROMPT_VERSION: ClassVar[str] = PROMPT_VERSION
    WITHOUT_PREFIX_CACHE: ClassVar[dict[str, Any]] = {"prompt_layout": "shared-prefix"}

    modules: Modules = "full"
    """Which modules run: 'M1' graph + direct answer; 'M1+M2' graph, oracles and
    backtracking (earliest candidate step wins); 'M1+M3' graph + counterfactual attribution
    over all steps; 'full' all three (the paper's CHIEF)."""
    prompt_layout: Layout = "instructions-first"
    """'instructions-first': every stage's instructions come first, in one system message
    that is the same for every call of every run, then the problem and conversation, the
    causal graph as far as it is built (in the order it is built), and a short request
    naming the stage, so a server's prefix cache serves the instructions, the conversation
    and the graph to every call that repeats them; 'shared-prefix': each stage's prompt
    starts with the problem and conversation and puts its own opening sentence and
    instructions after them (the layout of prompts 'chief-3'); 'paper': the paper's order
    (the stage's opening sentence first). Same instructions in each."""
    knowledge_base: str | None = None
    """Decomposition exemplars: a JSONL file of {task, steps}, 'builtin' for the small
    example shipped with faultfinder, or None for zero-shot decomposition."""
    retrieval: Literal["bm25", "embeddings"] = "bm25"
    """How exemplars are retrieved: lexical BM25, or cosine over embeddings."""
    embedding_model: str | None = None
    """For retrieval='embeddings': 'openai:MODEL' (OpenAI-compatible endpoint) or 'st:MODEL'
    (sentence-transformers, weights already on disk)."""
    embedding_base_url: str | None = None
    """Base URL of the embeddings endpoint (OpenAI's when None)."""
    embedding_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the embeddings endpoint's key."""
    exemplars: int = Field(default=2, ge=0, le=10)
    """Exemplars retrieved and inserted into the decomposition and oracle prompts (paper: 2)."""
    reflection_rounds: int = Field(default=2, ge=0, le=5)
    """Refinement requests sent back when a plan breaks the step-range rules, before the
    plan is repaired deterministically."""
    llm_step_edges: bool = True
    """Ask the model for step edges (paper Fig. 9); deterministic linking runs regardless."""
    deterministic_dataflow: bool = True
    """Link values (numbers, URLs, file names, quoted strings) to the step that first
    produced them."""
    max_dataflow_edges: int = Field(default=400, ge=0)
    """Upper bound on deterministic step edges."""
    loop_threshold: float = Field(default=0.75, ge=0.0, le=1.0)
    """Token Jaccard similarity from which two messages of one agent count as a repeat."""
    loop_max_gap: int = Field(default=12, ge=1)
    """Repeats further apart than this many steps are not chained into one loop group."""
    loop_min_tokens: int = Field(default=4, ge=1)
    """Messages with fewer content tokens are ignored by loop detection."""
    oracle_mode: Literal["single", "sequential"] = "single"
    """'single': one call synthesises all oracles in order (paper Fig. 10); 'sequential':
    one call per subtask with earlier oracles and the remaining trajectory (Eq. 2)."""
    screening: Literal["enforce", "model"] = "enforce"
    """'enforce': the final pick must survive the deterministic screening of the model's
    own per-candidate assessments; 'model': the model's final pick stands (paper)."""
    prompt_step_edges: int = Field(default=80, ge=0)
    """Step edges shown in graph views inside prompts (model edges first)."""
    stage_cache: str | None = DEFAULT_STAGE_CACHE
    """Directory of the on-disk stage cache (graph, oracles, candidates); None or 'none'
    disables it."""
    graph_file: str | None = None
    """Start from this graph JSON (from `faultfinder graph`) instead of building one."""
    graph_out: str | None = None
    """Write the graph JSON (with oracles and candidates when computed) to this path."""
    grammar: bool = True
    """Constrain the M1-only direct answer with the agent/step GBNF grammar (only the
    embedded llama.cpp model applies grammars)."""
    json_grammar: bool = False
    """Constrain the JSON stages with a generic JSON GBNF grammar. Off by default: with
    llama.cpp it made generation about 8x slower in our measurement."""
