"""What a replay did: the report written to a branch's ``report.json``.

:class:`ReplayReport` is filled in by the replay plan
(:class:`~faultfinder.replay.replayer.ReplayPlan`) and the proxy as calls arrive, then
read by the CLI, ``dover``, the web UI and fidelity benchmarks. It holds no decision
logic, so a reader of reports needs nothing of the plan.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

__all__ = ["Divergence", "LiveRequest", "ReplayReport"]


class Divergence(BaseModel):
    """A replayed call that matches no recorded call."""

    step: int | None
    """The nearest recorded step (the agent's first not yet matched), shown in the diff;
    None when nothing recorded was left to compare with."""
    agent: str
    """The calling agent."""
    agent_call: int
    """The call's ordinal among the agent's calls in this replay (0-based)."""
    expected_hash: str | None = None
    """Normalised-request hash of the nearest recorded step."""
    got_hash: str
    """Normalised-request hash of the replayed call."""
    difference: str | None = None
    """Where the normalised requests first differ (one line)."""
    diff: str | None = None
    """Unified diff of the normalised recorded request against the replayed one."""
    action: str
    """'refused' or 'went live'."""


class LiveRequest(BaseModel):
    """One request of a replay that reached (or would have reached) the upstream."""

    method: str
    """HTTP method."""
    path: str
    """Request path as the program sent it (query string left out)."""
    api: str | None = None
    """The model API for a model call ('chat', 'responses', ...); None for other paths."""
    agent: str | None = None
    """Calling agent of a model call."""
    step: int | None = None
    """Recorded step the call matched, if any."""
    origin: str | None = None
    """'live' or 'edited-input' for a model call; None for other paths."""
    status: int | None = None
    """HTTP status the upstream answered (None: unreachable, or not sent)."""
    background: Literal["poll", "cancel"] | None = None
    """A poll or cancel of a model call in background mode (Responses, ``background:
    true``): part of that call, whose ``api``, ``agent``, ``step`` and ``origin`` it
    carries; None for the call itself and for other paths."""

    def described(self) -> str:
        """What the request was, for a line of output: 'responses call by Researcher',
        'poll of responses call by Researcher', 'not a model call'."""
        if self.api is None:
            return "not a model call"
        what = f"{self.api} call" + (f" by {self.agent}" if self.agent else "")
        return what if self.background is None else f"{self.background} of {what}"


class ReplayReport(BaseModel):
    """What a replay did, for ``report.json`` and for fidelity figures."""

    recorded_steps: int
    """Steps in the recording."""
    at: int | None = None
    """Step from which the replay went live."""
    prefix_steps: int = 0
    """Recorded steps that were to be answered from the recording (before ``at``)."""
    reproduced: int = 0
    """Prefix steps whose request matched and were answered from the recording."""
    served_steps: list[int] = Field(default_factory=list)
    """Recorded steps answered from the recording, in serving order."""
    missing_steps: list[int] = Field(default_factory=list)
    """Prefix steps the program never asked for."""
    served_failures: list[int] = Field(default_factory=list)
    """Recorded failed calls (their ``call`` numbers in ``steps.jsonl``) answered again
    with the error they got while recording (same status, body and retry headers), in
    serving order: answered from the recording, never sent upstream, and not steps."""
    divergences: list[Divergence] = Field(default_factory=list)
    """Calls whose request differed from the recording."""
    edit: dict[str, Any] | None = None
    """The edit, as given."""
    edit_applied: bool = False
    """The program reached step ``at`` with the recorded request and got the edit (a
    tool-result edit: a request carried the edited result)."""
    at_reached: bool = False
    """The program reached step ``at`` with the recorded request (edit applied or not)."""
    edit_error: str | None = None
    """Why the edit could not be applied when step ``at`` was reached (the call was
    refused with HTTP 400 and ``x-should-retry: false``); None otherwise."""
    live_calls: int = 0
    """Every request that reached the upstream during the replay, whatever its path:
    model calls answered live and forwarded non-model requests (``live``)."""
    live: list[LiveRequest] = Field(default_factory=list)
    """Each of those requests, in arrival order."""
    passthrough_calls: int = 0
    """Of ``live_calls``, the requests on paths that are not model calls (models list,
    embeddings, files...), forwarded because an upstream was named on the command line."""
    background_requests: int = 0
    """Of ``live_calls``, the polls and cancels of model calls in background mode that
    went live: parts of those calls, not calls of their own."""
    blocked: list[LiveRequest] = Field(default_factory=list)
    """Non-model requests refused because no upstream was named on the command line."""
    extra_calls: int = 0
    """Calls after step ``at`` whose request matches no recorded request (the edit changed
    what the program asks, it asks more than it did, or a new agent speaks); live calls
    that match one are counted in ``live_calls`` and listed with that step."""
    refused_calls: int = 0
    """Calls refused (divergence under policy 'fail', or beyond the live window)."""
    window_reached: bool = False
    """The live window (stop_after_live) was used up and the program stopped."""
    normalisers: list[str] = Field(default_factory=list)
    """Built-in normalisers in force, and 'mask' when --mask was given."""
    normalised_fields: dict[str, list[str]] = Field(default_factory=dict)
    """Request fields (e.g. 'messages[0].content') whose volatile text was normalised,
    in the recording or the replay, with the rules that changed them."""
    apis: dict[str, int] = Field(default_factory=dict)
    """Model calls of this replay per API ('chat', 'responses', 'messages')."""
    program_exit_code: int | None = None
    """The replayed program's exit status (negative: killed by that signal; None: it did
    not start)."""
    program_stopped: bool = False
    """faultfinder stopped the program (the live window was used up, or the timeout)."""
    program_timed_out: bool = False
    """The program ran past the timeout and was stopped."""

    @property
    def fidelity(self) -> float:
        """Reproduced prefix steps / prefix steps (1.0 for an empty prefix)."""
        return self.reproduced / self.prefix_steps if self.prefix_steps else 1.0

    @property
    def faithful(self) -> bool:
        """Every prefix step reproduced, nothing diverged, and (without ``at``) no model
        call went live."""
        return (
            self.reproduced == self.prefix_steps
            and not self.divergences
            and (self.at is not None or self.model_calls_live == 0)
        )

    @property
    def model_calls_live(self) -> int:
        """Model calls that reached the upstream (their polls and cancels, and requests
        that are not model calls, left out)."""
        return self.live_calls - self.passthrough_calls - self.background_requests

    def edit_state(self) -> str:
        """What became of the edit: 'applied', or why not (for `replay`, `debug` and
        `verify-edit` alike)."""
        if self.edit_error:
            return f"could NOT be applied: {self.edit_error}"
        if self.edit_applied:
            return "applied"
        if self.at_reached and "tool_result" in (self.edit or {}):
            return (
                "NOT applied (the step was reached, but no request carrying the edited tool "
                "result was answered by the upstream)"
            )
        if self.at_reached:
            return (
                "NOT applied (the step was reached, but the upstream never answered the "
                "edited call)"
            )
        return "NOT applied (the program never reached it)"

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def program_failed(self) -> bool:
        """The program failed on its own: a non-zero exit status or the timeout (being
        stopped because the live window was used up is not a failure)."""
        if self.program_timed_out:
            return True
        if self.program_stopped and self.window_reached:
            return False
        return self.program_exit_code is not None and self.program_exit_code != 0

    def note_program(self, exit_code: int | None, stopped: bool, timed_out: bool) -> None:
        """Record how the replayed program ended."""
        self.program_exit_code = exit_code
        self.program_stopped = stopped
        self.program_timed_out = timed_out
