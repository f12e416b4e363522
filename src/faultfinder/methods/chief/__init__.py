"""CHIEF (Wang et al., 2026): hierarchical causal graph, oracle-guided backtracking and
counterfactual attribution. See docs/methods/chief.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.methods.chief.config import ChiefConfig

if TYPE_CHECKING:
    from faultfinder.llm.client import LLM
    from faultfinder.methods.chief.graph import CausalGraph
    from faultfinder.methods.chief.pipeline import Chief, write_graph
    from faultfinder.traces.schema import Trace

__all__ = ["CausalGraph", "Chief", "ChiefConfig", "ChiefMethod", "build_graph", "write_graph"]

# The pipeline (graph, oracles, prompts of every stage) is imported when CHIEF runs, not
# when the method is listed: `faultfinder methods` stays fast (tests/test_startup.py).
_LAZY = {
    "CausalGraph": "faultfinder.methods.chief.graph",
    "Chief": "faultfinder.methods.chief.pipeline",
    "write_graph": "faultfinder.methods.chief.pipeline",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ChiefMethod(MethodBase):
    """Graph (M1) → oracles and backtracking (M2) → counterfactual attribution (M3)."""

    name: ClassVar[str] = "chief"
    summary: ClassVar[str] = (
        "CHIEF: hierarchical causal graph, oracle-guided backtracking, counterfactual screening"
    )
    Config: ClassVar[type[MethodConfig]] = ChiefConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "M1": {"modules": "M1"},
        "M1+M2": {"modules": "M1+M2"},
        "M1+M3": {"modules": "M1+M3"},
        "full": {"modules": "full"},
        # The paper's setting: every module, on Who&When's output-only logs (the shared
        # defaults), with the paper's prompt order; docs/methods/chief.md, "Deviations
        # from the paper".
        "paper": {"modules": "full", "observability": "outputs", "prompt_layout": "paper"},
    }

    def __init__(self, config: ChiefConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, ChiefConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        from faultfinder.methods.chief.pipeline import Chief

        return await Chief(trace, llm, cfg).attribute()


async def build_graph(
    trace: Trace, llm: LLM, config: ChiefConfig, *, with_oracles: bool = False
) -> CausalGraph:
    """The causal graph of ``trace`` (M1), plus oracles and backtracking candidates (M2)
    when ``with_oracles``. Uses and fills the stage cache like the method does."""
    from faultfinder.methods.chief.pipeline import Chief

    run = Chief(trace, llm, config)
    graph = await run.graph()
    if with_oracles:
        await run.oracles_and_candidates(graph)
    return graph
