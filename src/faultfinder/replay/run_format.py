"""What a run directory holds: the names of its files, the schema of each line of
``steps.jsonl`` (:class:`RecordedCall`: one model call as the proxy saw it) and of
``meta.json`` (:class:`RunMeta`).

Plain data, read and written by :mod:`faultfinder.replay.recorder` (which writes run
directories, reads them back and builds their traces, and re-exports every name here) and
used by the proxy, the replayer and whatever reads a run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultfinder import __version__

__all__ = [
    "BRANCHES_DIR",
    "ERROR_HEADERS",
    "META_FILE",
    "REPORT_FILE",
    "STEPS_FILE",
    "TRACE_FILE",
    "Origin",
    "RecordedCall",
    "RunMeta",
]

Origin = Literal["recorded", "cached", "edited", "edited-input", "live"]
"""Where a call's answer came from: the upstream while recording ('recorded'), the
recording during a replay ('cached'), an edit ('edited'), the upstream after an edited
request ('edited-input'), or the upstream during a replay ('live')."""

ERROR_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry")
"""Headers of an upstream's error reply kept with the failed call
(:attr:`RecordedCall.error_headers`): those the OpenAI and Anthropic SDKs read to decide
whether and when to retry (``x-should-retry``, ``retry-after``, ``retry-after-ms``) and
the body's type. Request ids and rate-limit counters are left out."""

STEPS_FILE = "steps.jsonl"
TRACE_FILE = "trace.json"
META_FILE = "meta.json"
REPORT_FILE = "report.json"
BRANCHES_DIR = "branches"


class RecordedCall(BaseModel):
    """One model call as the proxy saw it (credentials removed), in its API's wire format."""

    call: int
    """Arrival order among this run's model calls (0-based)."""
    agent: str
    """Calling agent."""
    agent_source: str = "default"
    """How the agent was identified: header, path, system-prompt or default."""
    agent_call: int = -1
    """This agent's call number among its successful calls (0-based); -1 for failed calls."""
    path: str = "/v1/chat/completions"
    """Request path as the client sent it."""
    api: str = "chat"
    """The model API ('chat', 'responses', 'messages': see faultfinder.replay.apis)."""
    request: dict[str, Any]
    """The request body (what the model was asked), credentials removed."""
    request_hash: str
    """Hash of the normalised canonical request (see faultfinder.replay.matching)."""
    response: dict[str, Any] | None = None
    """The complete reply (for a stream: the reply its events add up to); None on
    failure."""
    events: list[str] | None = None
    """For a streamed reply: its server-sent events exactly as the upstream sent them,
    in order (a replay sends them again as they were)."""
    writes: list[int] | None = None
    """For a streamed reply: how many of ``events`` each upstream write carried (a replay
    keeps those boundaries)."""
    status: int = 200
    """HTTP status returned to the client."""
    error: str | None = None
    """Why the call failed, when it did."""
    error_body: dict[str, Any] | list[Any] | str | None = None
    """For a call the upstream answered with an error status (a 400, 429, 500...): the
    body of that error as the program got it (its JSON, or its text when not JSON),
    secrets scrubbed; for a stream the upstream ended with an error event (status 200:
    Anthropic's mid-stream ``error``, the Responses API's ``error`` or
    ``response.failed``, Chat Completions' error chunk), that event's data, the stream's
    events in :attr:`events`; for a background-mode Responses call whose polled response
    ended ``failed`` (status 200), that response. A replay answers the same request with
    it again. None for other failures (no upstream reply) and in recordings made before
    it was kept."""
    error_headers: dict[str, str] | None = None
    """The headers of that error reply a client acts on (:data:`ERROR_HEADERS`: whether
    and when to retry, the body's type), as the upstream sent them."""
    stream: bool = False
    """The client asked for a streamed reply."""
    origin: Origin = "recorded"
    """Where the answer came from."""
    replay_of: int | None = None
    """In a replay: index of the recorded step this call was matched to."""
    note: str | None = None
    """Replay remarks (divergence, edit) for this call."""
    started_at: datetime
    """When the request arrived."""
    ended_at: datetime
    """When the reply was complete."""
    latency_s: float = 0.0
    """Wall time from arrival to complete reply."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.response is not None and self.status == 200

    @property
    def replayable_error(self) -> bool:
        """A failed call whose error reply was kept, so a replay can answer it again: an
        error status, a stream that ended with an error event, or a background-mode
        response that ended ``failed``."""
        return (
            not self.ok
            and self.error_body is not None
            and (
                self.status >= 400
                or (self.stream and self.events is not None)
                or (bool(self.request.get("background")) and isinstance(self.error_body, dict))
            )
        )


class RunMeta(BaseModel):
    """What ``meta.json`` holds about a recording or a replay branch."""

    run_id: str
    """Directory name of the run (or branch)."""
    kind: Literal["recording", "branch"] = "recording"
    """A recording, or a replay branch of one."""
    command: list[str] = Field(default_factory=list)
    """The program that was run, as argv."""
    cwd: str | None = None
    """Working directory the program ran in."""
    upstream: str | None = None
    """The model endpoint calls were forwarded to."""
    upstreams: dict[str, str] = Field(default_factory=dict)
    """Per-API endpoints by API name (``--api-upstream``: 'messages' ->
    'https://api.anthropic.com/v1'): that API's calls went there, the others to
    ``upstream``. URLs only, credentials removed as from ``upstream``. Missing from
    recordings made before it was kept: read as none."""
    proxy_url: str | None = None
    """Where the proxy listened."""
    started_at: datetime | None = None
    """Start of the run."""
    ended_at: datetime | None = None
    """End of the run."""
    exit_code: int | None = None
    """The program's exit status (None while running or when it was not started)."""
    failed_calls: int = 0
    """Model calls that failed (upstream errors, streams cut short): kept in steps.jsonl,
    not steps."""
    unrecorded: dict[str, int] = Field(default_factory=dict)
    """Requests on paths that are not model calls, forwarded unrecorded, by
    'METHOD path' (e.g. 'GET /v1/models': 1)."""
    killed: bool = False
    """The program was stopped by faultfinder (replay window reached or timeout)."""
    timed_out: bool = False
    """The program ran past ``--timeout`` and was stopped (a failure, unlike being
    stopped once the replay window was used up)."""
    task: str | None = None
    """The task, when given (else the trace takes the first user message)."""
    ground_truth: str | None = None
    """Reference answer, when given."""
    reference_steps: list[str] = Field(default_factory=list)
    """A reference solution, step by step, when given (DoVer's milestones come from it)."""
    final_answer: str | None = None
    """The program's answer: its last 'FINAL ANSWER:' output line, when it printed one."""
    system: str | None = None
    """Name of the multi-agent system, when given."""
    parent: str | None = None
    """For a branch: the run directory it replays."""
    replay: dict[str, Any] | None = None
    """For a branch: the replay options (step, edit, divergence policy)."""
    faultfinder_version: str = __version__
    """Version that wrote the run."""
