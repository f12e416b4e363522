"""DoVer (do-then-verify) intervention-driven debugging over recorded runs, and
TraceElephant's dynamic agentic check. See docs/methods/dover.md."""

from faultfinder.dover.models import DoverConfig, DoverRow, Intervention, RepeatResult, Trial
from faultfinder.dover.pipeline import run_dover
from faultfinder.dover.replays import Executor, ReplayExecutor
from faultfinder.dover.report import DoverSummary, aggregate, format_summary, read_rows
from faultfinder.dover.verdict import classify

__all__ = [
    "DoverConfig",
    "DoverRow",
    "DoverSummary",
    "Executor",
    "Intervention",
    "RepeatResult",
    "ReplayExecutor",
    "Trial",
    "aggregate",
    "classify",
    "format_summary",
    "read_rows",
    "run_dover",
]
