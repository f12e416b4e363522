"""LangGraph's own run metadata → the agent the user named, for every importer.

LangGraph puts ``langgraph_node`` (the node running) and ``langgraph_checkpoint_ns`` (the
path of nodes down to it, ``"research_expert:<task id>|agent:<task id>"``) on every run it
starts; LangSmith keeps them in ``extra.metadata``, Langfuse in ``metadata``, OpenInference's
LangChain instrumentation in the span attribute ``metadata`` (a JSON object). A prebuilt agent
(``create_react_agent``, ``create_agent``) is a subgraph whose model and tools run in inner
nodes named ``agent`` / ``model`` and ``tools``: the agent the user named is the node that
holds that subgraph. So the agent is the innermost node on the path that is not such an inner
node; a path of inner nodes only (a flat graph whose node is called ``agent``) keeps its own
node name. Every name returned is one written in the metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultfinder.traces.importers._spans import maybe_json

INNER_NODES = frozenset(
    {
        "agent",  # langgraph.prebuilt.create_react_agent
        "model",  # langchain.agents.create_agent
        "tools",
        "pre_model_hook",
        "post_model_hook",
        "generate_structured_response",
    }
)
"""Node names a prebuilt agent gives the nodes inside its own subgraph."""


def graph_node_agent(meta: Mapping[str, Any]) -> str | None:
    """The agent named by LangGraph metadata (``langgraph_node``, ``langgraph_checkpoint_ns``
    or ``checkpoint_ns``), or None when there is none."""
    node = meta.get("langgraph_node")
    namespace = meta.get("langgraph_checkpoint_ns") or meta.get("checkpoint_ns")
    path: list[str] = []
    if isinstance(namespace, str):
        path = [part.split(":", 1)[0].strip() for part in namespace.split("|")]
        path = [name for name in path if name]
    if isinstance(node, str) and node.strip() and (not path or path[-1] != node.strip()):
        path.append(node.strip())  # checkpoint_ns is the namespace of the node's graph
    for name in reversed(path):
        if name not in INNER_NODES:
            return name
    return path[-1] if path else None


def span_graph_node_agent(attributes: Mapping[str, Any]) -> str | None:
    """The agent named by LangGraph metadata in a span's (flattened) attributes: the
    ``metadata`` attribute as a JSON string or an object, or its flattened ``metadata.*``
    keys."""
    meta = maybe_json(attributes.get("metadata"))
    if not isinstance(meta, Mapping):
        meta = {
            key.removeprefix("metadata."): value
            for key, value in attributes.items()
            if key.startswith("metadata.langgraph_") or key == "metadata.checkpoint_ns"
        }
    return graph_node_agent(meta)
