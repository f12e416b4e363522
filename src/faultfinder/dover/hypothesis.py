"""One failure hypothesis per trial, from any registered attribution method.

The method sees the trial alone, as a trace of its own (steps renumbered from 0, task and
reference answer kept), which is how DoVer applies its All-at-Once prompt to segmented
logs; its step is mapped back to the whole log's index.
"""

from __future__ import annotations

from faultfinder.dover.models import Hypothesis, Trial
from faultfinder.judging.method import Method, run_method
from faultfinder.llm.client import LLM
from faultfinder.traces.schema import Trace


def trial_trace(trace: Trace, trial: Trial) -> Trace:
    """The trial's steps as a trace numbered from 0."""
    steps = [
        step.model_copy(update={"index": i})
        for i, step in enumerate(trace.steps[trial.start : trial.end + 1])
    ]
    return trace.model_copy(
        update={"id": f"{trace.id}#trial{trial.index}", "steps": steps, "label": None}
    )


async def hypothesise(
    trace: Trace, trial: Trial, method: Method, llm: LLM, label: str
) -> Hypothesis:
    """The method's verdict on ``trial``, in whole-log step numbers."""
    result = await run_method(method, trial_trace(trace, trial), llm, label=label)
    step = None if result.step is None else result.step + trial.start
    details = dict(result.details)
    if result.error:
        details["error"] = result.error
    return Hypothesis(
        trial=trial.index,
        agent=result.agent,
        step=step,
        reason=result.reason,
        method=label,
        status=result.status,
        details=details,
    )
