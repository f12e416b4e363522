"""Trace schema, reading and writing, and importers."""

from faultfinder.traces.schema import (
    SCHEMA_VERSION,
    Agent,
    GoldLabel,
    SourceInfo,
    Step,
    ToolCall,
    ToolResult,
    Trace,
)

__all__ = [
    "SCHEMA_VERSION",
    "Agent",
    "GoldLabel",
    "SourceInfo",
    "Step",
    "ToolCall",
    "ToolResult",
    "Trace",
]
