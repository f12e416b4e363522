"""The one ground-truth lookup: what a method shows as the task's reference answer.

``--with-ground-truth`` (``MethodConfig.with_ground_truth``) means the same in every
method: the judge's prompt carries :func:`reference_answer` of the trace. When the trace
has none, every method runs as without it, :func:`faultfinder.judging.method.run_method`
logs a warning and the result records ``ground_truth: "unavailable"`` (else ``"shown"``,
or ``"off"`` when not asked for). The gold *label* (agent, step) is never shown.
"""

from __future__ import annotations

import json
from typing import Literal

from faultfinder.traces.schema import Trace

GroundTruthStatus = Literal["off", "shown", "unavailable"]


def reference_answer(trace: Trace) -> str | None:
    """The trace's reference answer, or for runs judged by tests (TraceElephant's SWE-agent
    traces) the recorded test outcome; None when it has neither."""
    if trace.ground_truth and trace.ground_truth.strip():
        return trace.ground_truth
    tests = trace.metadata.get("tests_status")
    if tests:
        return "test results: " + json.dumps(tests, default=str, ensure_ascii=False)
    return None


def ground_truth_for(trace: Trace, with_ground_truth: bool) -> str | None:
    """What a prompt shows as the reference answer: None when not asked for or unknown."""
    return reference_answer(trace) if with_ground_truth else None


def ground_truth_status(trace: Trace, with_ground_truth: bool) -> GroundTruthStatus:
    """'off', 'shown' or 'unavailable' (asked for, but the trace has no reference answer)."""
    if not with_ground_truth:
        return "off"
    return "shown" if reference_answer(trace) is not None else "unavailable"
