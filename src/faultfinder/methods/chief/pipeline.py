"""CHIEF end to end: graph (M1), oracles and backtracking (M2), counterfactual attribution
(M3), with the stage cache in between.

How a failed stage degrades (every case is recorded in the graph's ``stages``):
- decomposition unparsed → one subtask covering the whole run ('fallback');
- OTAR unparsed → agent nodes without OTAR; edges unparsed → default subtask edges only;
  step edges unparsed → deterministic step edges only;
- oracles unparsed → backtracking runs without oracles;
- backtracking unparsed → 'full' attributes over every step (as M1+M3); 'M1+M2' has no
  candidates to choose from and returns 'unparsed';
- the final answer (direct or attribution) unparsed → the verdict is 'unparsed'.
Nothing is ever filled in with a guessed answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultfinder.errors import ConfigError
from faultfinder.judging.method import Verdict
from faultfinder.judging.render import shows_inputs
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import ScriptedBackend
from faultfinder.methods.chief import cache as stage_cache
from faultfinder.methods.chief.attribution import counterfactual, direct, screen
from faultfinder.methods.chief.backtrack import backtrack
from faultfinder.methods.chief.config import ChiefConfig
from faultfinder.methods.chief.context import StageContext
from faultfinder.methods.chief.dataflow import link_values, merge_step_edges
from faultfinder.methods.chief.decompose import decompose, exemplar_text
from faultfinder.methods.chief.edges import build_edges, build_step_edges
from faultfinder.methods.chief.graph import Candidates, CausalGraph, StepEdge
from faultfinder.methods.chief.knowledge import (
    BUILTIN,
    KnowledgeBase,
    Retrieved,
    load_knowledge_base,
    make_embedder,
    retrieve,
)
from faultfinder.methods.chief.loops import LoopConfig, detect_loops
from faultfinder.methods.chief.oracles import synthesize_oracles
from faultfinder.methods.chief.otar import agent_nodes, parse_otar_stage
from faultfinder.methods.chief.prompts import PROMPT_VERSION
from faultfinder.traces.schema import Trace

_GRAPH_OPTIONS = (
    "with_ground_truth",
    "observability",
    "prompt_layout",
    "context_budget",
    "knowledge_base",
    "retrieval",
    "embedding_model",
    "exemplars",
    "reflection_rounds",
    "llm_step_edges",
    "deterministic_dataflow",
    "max_dataflow_edges",
    "loop_threshold",
    "loop_max_gap",
    "loop_min_tokens",
    "temperature",
    "top_p",
    "seed",
    "max_output_tokens",
    "grammar",
    "json_grammar",
)
_M2_OPTIONS = ("oracle_mode", "prompt_step_edges")
OWN_INSTRUCTIONS_NOTE = "own instructions only: every stage's did not fit context_budget"
"""A stage's note when the 'instructions-first' prompt did not fit and the stage was sent
with its own instructions (the 'shared-prefix' form)."""


class Chief:
    """One CHIEF run over one trace."""

    def __init__(self, trace: Trace, llm: LLM, config: ChiefConfig) -> None:
        self.trace = trace
        self.llm = llm
        self.config = config
        self.ctx = StageContext(trace, config, llm)
        self.kb: KnowledgeBase | None = (
            load_knowledge_base(config.knowledge_base) if config.knowledge_base else None
        )
        self.retrieved: Retrieved | None = None
        directory = stage_cache.cache_directory(config.stage_cache)
        # Scripted replies depend on call order, not on the request: caching them would
        # only leave entries that can never be hit again.
        scripted = isinstance(llm.backend, ScriptedBackend)
        self.cache = (
            stage_cache.StageCache(directory) if directory is not None and not scripted else None
        )
        self.cache_use: dict[str, str] = {}
        self.trace_hash = stage_cache.trace_hash(trace)

    # --- keys -------------------------------------------------------------------

    def _graph_key(self) -> str:
        options = self.config.model_dump(mode="json", include=set(_GRAPH_OPTIONS))
        return stage_cache.stage_key(
            stage="graph",
            trace=self.trace_hash,
            model=stage_cache.model_identity(self.llm),
            prompt_version=PROMPT_VERSION,
            options=options,
            kb=self.kb.fingerprint() if self.kb else None,
        )

    def _m2_key(self, graph_key: str) -> str:
        options = self.config.model_dump(mode="json", include=set(_M2_OPTIONS))
        return stage_cache.stage_key(stage="m2", graph=graph_key, options=options)

    # --- retrieval --------------------------------------------------------------

    def _retrieve(self) -> Retrieved:
        if self.retrieved is None:
            cfg = self.config
            if self.kb is None:
                self.retrieved = Retrieved()
            else:
                self.retrieved = retrieve(
                    self.kb,
                    self.trace,
                    k=cfg.exemplars,
                    retrieval=cfg.retrieval,
                    embedder_factory=(
                        (
                            lambda: make_embedder(
                                cfg.embedding_model or "",
                                base_url=cfg.embedding_base_url,
                                api_key_env=cfg.embedding_api_key_env,
                            )
                        )
                        if cfg.retrieval == "embeddings"
                        else None
                    ),
                )
        return self.retrieved

    # --- M1 ---------------------------------------------------------------------

    async def graph(self) -> CausalGraph:
        """The hierarchical causal graph (from a graph file, the cache, or built now)."""
        cfg = self.config
        if cfg.graph_file:
            self.cache_use["graph"] = "file"
            return self._load_graph_file(cfg.graph_file)
        key = self._graph_key()
        if self.cache is not None:
            hit = self.cache.get("graph", key)
            if hit is not None:
                try:
                    graph = CausalGraph.model_validate(hit)
                except ValidationError:
                    graph = None
                if graph is not None:
                    self.cache_use["graph"] = "hit"
                    for record in graph.stages.values():
                        if record.status == "ok":
                            record.status = "cached"
                    return graph
        graph = await self._build_graph()
        self.cache_use["graph"] = "miss"
        if self.cache is not None and all(r.status == "ok" for r in graph.stages.values()):
            self.cache.put("graph", key, graph.model_dump(mode="json"))
        return graph

    def _load_graph_file(self, path: str) -> CausalGraph:
        try:
            graph = CausalGraph.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"graph_file not found: {path}") from None
        except ValidationError as exc:
            raise ConfigError(
                f"graph_file {path} is not a CHIEF graph: {exc.errors()[0]['msg']}"
            ) from None
        if graph.trace_hash != self.trace_hash:
            raise ConfigError(
                f"graph_file {path} was built from a different trace (or a different version "
                "of it); rebuild it with `faultfinder graph`."
            )
        for record in graph.stages.values():
            if record.status == "ok":
                record.status = "loaded"
        return graph

    async def _build_graph(self) -> CausalGraph:
        cfg = self.config
        ctx = self.ctx
        retrieved = self._retrieve()
        kb_name = self.kb.name if self.kb else None
        if kb_name and kb_name != BUILTIN:
            kb_name = str(Path(kb_name))
        subtasks, info, decompose_rec = await decompose(ctx, retrieved, kb_name)
        graph = CausalGraph(
            trace_id=self.trace.id,
            trace_hash=self.trace_hash,
            task=self.trace.task,
            n_steps=ctx.n_steps,
            step_agents=[s.agent for s in self.trace.steps],
            model=self.llm.name,
            prompt_version=PROMPT_VERSION,
            subtasks=subtasks,
            decomposition=info,
        )
        graph.stages["decompose"] = decompose_rec
        graph.agents = agent_nodes(ctx, subtasks)
        graph.stages["otar"] = await parse_otar_stage(ctx, subtasks, graph.agents)
        graph.subtask_edges, graph.agent_edges, graph.stages["edges"] = await build_edges(
            ctx, subtasks, graph.agents
        )
        llm_step_edges: list[StepEdge] = []
        if cfg.llm_step_edges:
            llm_step_edges, graph.stages["step_edges"] = await build_step_edges(ctx, subtasks)
        deterministic = (
            link_values(
                self.trace,
                include_inputs=shows_inputs(cfg.observability),
                max_edges=cfg.max_dataflow_edges,
            )
            if cfg.deterministic_dataflow
            else []
        )
        graph.step_edges = merge_step_edges(llm_step_edges, deterministic)
        graph.loops = detect_loops(
            self.trace,
            LoopConfig(
                threshold=cfg.loop_threshold,
                max_gap=cfg.loop_max_gap,
                min_tokens=cfg.loop_min_tokens,
            ),
        )
        self._note_truncation(graph)
        return graph

    def _note_truncation(self, graph: CausalGraph) -> None:
        notes = (
            (self.ctx.own_instructions, OWN_INSTRUCTIONS_NOTE),
            (self.ctx.truncated, "conversation truncated to fit context_budget"),
        )
        for stages, extra in notes:
            for stage in sorted(stages):
                record = graph.stages.get(stage.replace("-", "_"))
                if record is not None and extra not in record.note:
                    record.note = f"{record.note} | {extra}" if record.note else extra

    # --- M2 ---------------------------------------------------------------------

    async def oracles_and_candidates(self, graph: CausalGraph) -> None:
        """Fill ``graph.oracles`` and ``graph.candidates`` (cached as one entry)."""
        if graph.candidates is not None and graph.oracles:
            self.cache_use["m2"] = "file"
            return
        key = self._m2_key(self._graph_key()) if not self.config.graph_file else None
        if self.cache is not None and key is not None:
            hit = self.cache.get("m2", key)
            if hit is not None:
                try:
                    restored = CausalGraph.model_validate(hit["graph"])
                except (ValidationError, KeyError, TypeError):
                    restored = None
                if restored is not None:
                    graph.oracles = restored.oracles
                    graph.candidates = restored.candidates
                    for name in ("oracles", "backtrack"):
                        if name in restored.stages:
                            graph.stages[name] = restored.stages[name].model_copy(
                                update={"status": "cached"}
                            )
                    self.cache_use["m2"] = "hit"
                    return
        rag = exemplar_text(self._retrieve())
        graph.oracles, graph.stages["oracles"] = await synthesize_oracles(
            self.ctx, graph.subtasks, rag
        )
        if not graph.oracles:
            graph.stages["oracles"].note += " | backtracking runs without oracles"
        graph.candidates, graph.stages["backtrack"] = await backtrack(self.ctx, graph)
        self._note_truncation(graph)
        self.cache_use["m2"] = "miss"
        stages_ok = all(graph.stages[n].status == "ok" for n in ("oracles", "backtrack"))
        if self.cache is not None and key is not None and stages_ok:
            self.cache.put("m2", key, {"graph": graph.model_dump(mode="json")})

    # --- the method -------------------------------------------------------------

    async def attribute(self) -> Verdict:
        cfg = self.config
        graph = await self.graph()
        verdict: Verdict
        details: dict[str, Any] = {"modules": cfg.modules}
        if cfg.modules == "M1":
            answer, record = await direct(self.ctx, graph)
            graph.stages["direct"] = record
            if answer is None:
                verdict = Verdict(status="unparsed", reason=record.note)
            else:
                verdict = Verdict(
                    agent=answer.agent,
                    step=answer.step,
                    reason=answer.reason,
                    details={"stages_supporting": []},
                )
        else:
            pruned = cfg.modules in ("M1+M2", "full")
            if pruned:
                await self.oracles_and_candidates(graph)
            if cfg.modules == "M1+M2":
                verdict = self._earliest_candidate(graph)
            else:
                verdict = await self._counterfactual(graph, pruned)
        self._note_truncation(graph)
        details.update(verdict.details)
        details["graph"] = graph.summary()
        details["stages"] = {name: rec.model_dump() for name, rec in graph.stages.items()}
        details["stage_cache"] = dict(self.cache_use)
        if graph.candidates is not None:
            details["candidates"] = graph.candidates.model_dump()
        if cfg.graph_out:
            write_graph(graph, cfg.graph_out)
            details["graph"]["path"] = cfg.graph_out
        return verdict.model_copy(update={"details": details})

    def _widened_steps(self, graph: CausalGraph, cand: Candidates) -> tuple[list[int], str]:
        if cand.steps:
            return cand.steps, ""
        nodes = [graph.agent_node(n) for n in cand.agents]
        steps = sorted({s for node in nodes if node is not None for s in node.steps})
        if steps:
            return steps, "no candidate step: widened to the candidate agents' steps"
        subs = [graph.subtask(s) for s in cand.subtasks]
        steps = sorted({i for sub in subs if sub is not None for i in sub.steps()})
        if steps:
            return steps, "no candidate step or agent: widened to the candidate subtasks' steps"
        return [], "backtracking found no discrepancy"

    def _earliest_candidate(self, graph: CausalGraph) -> Verdict:
        """M1+M2 without M3: the earliest candidate step (the paper's root-cause definition,
        Eq. 1, applied to the backtracking candidates)."""
        cand = graph.candidates
        if cand is None:
            return Verdict(status="unparsed", reason="backtracking reply unparsed")
        steps, note = self._widened_steps(graph, cand)
        if not steps:
            return Verdict(status="no-error-found", reason=note)
        step = steps[0]
        reason = cand.reasons.get(f"step {step}", "")
        return Verdict(
            agent=graph.step_agents[step],
            step=step,
            reason=reason or "earliest backtracking candidate",
            details={"selection": "earliest candidate step", "widening": note},
        )

    async def _counterfactual(self, graph: CausalGraph, pruned: bool) -> Verdict:
        note = ""
        if pruned and graph.candidates is not None:
            steps, note = self._widened_steps(graph, graph.candidates)
            if not steps:
                steps, note = list(range(graph.n_steps)), note + "; every step is a candidate"
        else:
            if pruned:
                note = "backtracking unparsed: every step is a candidate (as M1+M3)"
            steps = list(range(graph.n_steps))
            pruned = False
        answer, record = await counterfactual(self.ctx, graph, steps, pruned)
        graph.stages["attribution"] = record
        if answer is None:
            return Verdict(status="unparsed", reason=record.note, details={"widening": note})
        model_pick = {"agent": answer.agent, "step": answer.step, "stages": answer.stages}
        details: dict[str, Any] = {
            "widening": note,
            "model_pick": model_pick,
            "assessments": [a.model_dump() for a in answer.assessments],
        }
        if not 0 <= answer.step < graph.n_steps:
            # Nothing to screen from: the pick stands as stated, and run_method's
            # agent/step rule keeps the agent and marks the step unparsed with its reason.
            details["stages_supporting"] = []
            return Verdict(
                agent=answer.agent, step=answer.step, reason=answer.reason, details=details
            )
        result = screen(answer, graph)
        details["screening"] = result.model_dump()
        if self.config.screening == "model":
            details["stages_supporting"] = answer.stages
            return Verdict(
                agent=answer.agent, step=answer.step, reason=answer.reason, details=details
            )
        details["stages_supporting"] = result.stages
        reason = answer.reason
        if result.overridden:
            reason = (
                f"Screening moved the pick from step {answer.step} to step {result.step} "
                f"({'; '.join(result.trail[-2:])}). Model's reason: {answer.reason}"
            )
        return Verdict(agent=result.agent, step=result.step, reason=reason, details=details)


def write_graph(graph: CausalGraph, path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(graph.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(p)
