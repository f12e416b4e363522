"""Replay decisions: which recorded answer (or edit, or live call) each incoming call gets.

A replay re-runs the same program through the proxy. Each incoming call is matched to a
recorded step by (agent, that agent's call number), then checked against the recorded
request's normalised hash:

- before step ``at`` (or everywhere, without ``at``): a matching request is answered from
  the recording; a mismatch means the program diverged on its own. It is reported, and by
  default refused (HTTP 409), never answered with a recorded reply to a different request;
- at step ``at``: the edited output is served (``Edit.output``), or the edited request
  is sent to the upstream (``Edit.input``), or, with no edit, the step is re-run live;
- after step ``at``, and for calls beyond the recording: the upstream answers live.

The plan is plain state, called from the proxy's event loop only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from faultfinder.replay.edits import (
    Edit,
    reply_message,
    rewrite_tool_result,
    tool_result_target,
)
from faultfinder.replay.matching import first_difference, normalise_request, request_hash
from faultfinder.replay.recorder import Origin, RecordedCall

DivergencePolicy = Literal["fail", "live"]


class ReplayOptions(BaseModel):
    """How a replay treats the recording."""

    at: int | None = Field(default=None, ge=0)
    """Step (canonical 0-based trace index) from which the run goes live; None replays
    every recorded call and only calls beyond the recording go live."""
    edit: Edit | None = None
    """The change applied at step ``at``."""
    on_divergence: DivergencePolicy = "fail"
    """A request that differs from the recorded one before ``at``: 'fail' refuses it
    (HTTP 409, the program sees an error), 'live' sends it to the upstream and carries on
    live for that agent. Either way it is reported."""
    masks: list[str] = Field(default_factory=list)
    """Regular expressions whose matches in message text are ignored when comparing
    requests (timestamps, random ids the program puts in prompts)."""
    stop_after_live: int | None = Field(default=None, ge=1)
    """Stop the program once this many steps from ``at`` on (the edited step included)
    have completed: an observation window, as in TraceElephant's dynamic check."""
    live_overrides: dict[str, Any] = Field(default_factory=dict)
    """Request parameters forced on live calls (e.g. {"temperature": 0.3})."""

    @model_validator(mode="after")
    def _edit_needs_step(self) -> ReplayOptions:
        if self.edit is not None and self.at is None:
            raise ValueError("an edit needs the step it applies to (--at)")
        return self


@dataclass
class Decision:
    """What to do with one incoming call."""

    action: Literal["serve", "live", "reject"]
    origin: Origin
    recorded: RecordedCall | None = None
    """The recorded step the call was matched to, if any."""
    step: int | None = None
    """That step's trace index."""
    response: dict[str, Any] | None = None
    """For 'serve': the reply to send."""
    body: dict[str, Any] | None = None
    """For 'live': the request to send upstream."""
    status: int = 200
    message: str = ""
    note: str | None = None


class Divergence(BaseModel):
    """A replayed request that differs from the recorded one."""

    step: int
    """Recorded step the call was matched to."""
    agent: str
    agent_call: int
    expected_hash: str
    got_hash: str
    difference: str | None = None
    """Where the normalised requests first differ."""
    action: str
    """'refused' or 'went live'."""


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
    divergences: list[Divergence] = Field(default_factory=list)
    """Calls whose request differed from the recording."""
    edit: dict[str, Any] | None = None
    """The edit, as given."""
    edit_applied: bool = False
    """The program reached step ``at`` with the recorded request and got the edit."""
    live_calls: int = 0
    """Calls answered by the upstream."""
    extra_calls: int = 0
    """Calls with no recorded counterpart (beyond the recording, or a new agent)."""
    refused_calls: int = 0
    """Calls refused (divergence under policy 'fail', or beyond the live window)."""
    window_reached: bool = False
    """The live window (stop_after_live) was used up and the program stopped."""

    @property
    def fidelity(self) -> float:
        """Reproduced prefix steps / prefix steps (1.0 for an empty prefix)."""
        return self.reproduced / self.prefix_steps if self.prefix_steps else 1.0

    @property
    def faithful(self) -> bool:
        """Every prefix step reproduced and nothing diverged."""
        return self.reproduced == self.prefix_steps and not self.divergences


class ReplayPlan:
    """Decides each incoming call of a replay against a recording."""

    def __init__(self, recorded: list[RecordedCall], options: ReplayOptions) -> None:
        self.recorded = [c for c in recorded if c.ok]
        self.options = options
        if options.at is not None and options.at >= len(self.recorded):
            raise ValueError(
                f"step {options.at} is outside the recording (steps 0..{len(self.recorded) - 1})"
            )
        self.by_key: dict[tuple[str, int], int] = {
            (c.agent, c.agent_call): i for i, c in enumerate(self.recorded)
        }
        self.counters: dict[str, int] = {}
        self.live_agents: set[str] = set()
        prefix = len(self.recorded) if options.at is None else options.at
        self.report = ReplayReport(
            recorded_steps=len(self.recorded),
            at=options.at,
            prefix_steps=prefix,
            edit=options.edit.describe() if options.edit else None,
        )
        self._served: set[int] = set()
        self._live_started = 0
        self._live_done = 0
        self._tool_result: tuple[str, str] | None = None
        """(tool call id, new content) once a tool-result edit is active."""

    # --- decisions -------------------------------------------------------------------

    def decide(
        self, agent: str, body: dict[str, Any], compare: dict[str, Any] | None = None
    ) -> Decision:
        """The decision for the next call of ``agent`` asking ``body``.

        ``compare`` is the request as it would be recorded (credentials scrubbed), used
        for the comparison with the recording; ``body`` is what would be sent upstream.
        """
        compare = body if compare is None else compare
        number = self.counters.get(agent, 0)
        self.counters[agent] = number + 1
        step = self.by_key.get((agent, number))
        if step is None:
            self.report.extra_calls += 1
            return self._live(body, "live", None, None, "no recorded call matches")
        recorded = self.recorded[step]
        at = self.options.at
        if agent in self.live_agents or (at is not None and step > at):
            return self._live(body, "live", recorded, step)
        got = request_hash(compare, self.options.masks)
        expected = request_hash(recorded.request, self.options.masks)
        if got != expected:
            return self._diverged(agent, number, step, recorded, body, compare, expected, got)
        if at is not None and step == at:
            return self._at_step(recorded, step, body)
        self._served.add(step)
        self.report.served_steps.append(step)
        self.report.reproduced += 1
        return Decision(
            "serve", "cached", recorded, step, response=copy.deepcopy(recorded.response)
        )

    def _diverged(
        self,
        agent: str,
        number: int,
        step: int,
        recorded: RecordedCall,
        body: dict[str, Any],
        compare: dict[str, Any],
        expected: str,
        got: str,
    ) -> Decision:
        difference = first_difference(
            normalise_request(recorded.request, self.options.masks),
            normalise_request(compare, self.options.masks),
        )
        refuse = self.options.on_divergence == "fail"
        self.report.divergences.append(
            Divergence(
                step=step,
                agent=agent,
                agent_call=number,
                expected_hash=expected,
                got_hash=got,
                difference=difference,
                action="refused" if refuse else "went live",
            )
        )
        note = f"diverged from recorded step {step}: {difference}"
        if refuse:
            self.report.refused_calls += 1
            return Decision(
                "reject",
                "live",
                recorded,
                step,
                status=409,
                message=(
                    f"faultfinder replay: this call by agent '{agent}' (its call {number}) "
                    f"differs from recorded step {step} ({difference}). The program diverged "
                    "from the recording on its own; pin its sources of nondeterminism (see "
                    "docs/replay.md), mask volatile text with --mask, or replay with "
                    "--on-divergence live."
                ),
                note=note,
            )
        self.live_agents.add(agent)
        return self._live(body, "live", recorded, step, note)

    def _at_step(self, recorded: RecordedCall, step: int, body: dict[str, Any]) -> Decision:
        edit = self.options.edit
        self.report.edit_applied = edit is not None and edit.kind != "tool_result"
        if edit is None:
            return self._live(body, "live", recorded, step, "re-run live from this step")
        if edit.kind == "input":
            assert edit.input is not None
            changed = apply_input_edit(body, edit.input, edit.input_mode)
            return self._live(changed, "edited-input", recorded, step, "edited request")
        if edit.kind == "tool_result":
            return self._tool_result_at_step(recorded, step, body)
        response = edited_response(recorded.response or {}, edit)
        self._count_live_done()
        return Decision("serve", "edited", recorded, step, response=response, note="edited reply")

    def _tool_result_at_step(
        self, recorded: RecordedCall, step: int, body: dict[str, Any]
    ) -> Decision:
        # From this step on, every request carrying the result gets the edited one. If the
        # step's own request carries it, the step goes live; if the step's reply makes the
        # call, that reply is served and the edit lands on the request sending the result.
        edit = self.options.edit
        assert edit is not None and edit.tool_result is not None
        self._tool_result = (
            tool_result_target(edit.tool_result, recorded.response),
            edit.tool_result.content,
        )
        if rewrite_tool_result(body, *self._tool_result) is not None:
            return self._live(body, "edited-input", recorded, step, "edited tool result")
        self._count_live_done()
        return Decision(
            "serve",
            "cached",
            recorded,
            step,
            response=copy.deepcopy(recorded.response),
            note="recorded reply; its tool result is edited in later requests",
        )

    def _live(
        self,
        body: dict[str, Any],
        origin: Origin,
        recorded: RecordedCall | None,
        step: int | None,
        note: str | None = None,
    ) -> Decision:
        limit = self.options.stop_after_live
        if limit is not None and self._live_started >= limit:
            self.report.refused_calls += 1
            self.report.window_reached = True
            return Decision(
                "reject",
                origin,
                recorded,
                step,
                status=503,
                message="faultfinder replay: the live window is used up; the program is stopped",
            )
        self._live_started += 1
        self.report.live_calls += 1
        if self._tool_result is not None:
            rewritten = rewrite_tool_result(body, *self._tool_result)
            if rewritten is not None:
                body, origin = rewritten, "edited-input"
                note = note or "edited tool result"
                self.report.edit_applied = True
        sent = {**body, **self.options.live_overrides} if self.options.live_overrides else body
        return Decision("live", origin, recorded, step, body=sent, note=note)

    # --- progress ----------------------------------------------------------------------

    def _count_live_done(self) -> None:
        # The edited step opens the live window as the first of its steps.
        self._live_started += 1
        self.live_finished()

    def live_finished(self) -> None:
        """A live call completed (called by the proxy)."""
        self._live_done += 1
        limit = self.options.stop_after_live
        if limit is not None and self._live_done >= limit:
            self.report.window_reached = True

    @property
    def should_stop(self) -> bool:
        """The live window is used up: the program can be stopped."""
        return self.report.window_reached

    def finish(self) -> ReplayReport:
        """The final report (missing prefix steps filled in)."""
        prefix = self.report.prefix_steps
        self.report.missing_steps = [i for i in range(prefix) if i not in self._served]
        return self.report


def last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for position in range(len(messages) - 1, -1, -1):
        if messages[position].get("role") == "user":
            return position
    return None


def apply_input_edit(body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
    """The request with its instruction edited."""
    changed = copy.deepcopy(body)
    messages: list[dict[str, Any]] = list(changed.get("messages") or [])
    position = last_user_index(messages)
    if mode == "append-user" or position is None:
        messages.append({"role": "user", "content": text})
    else:
        messages[position] = {**messages[position], "content": text}
    changed["messages"] = messages
    return changed


def edited_response(recorded: dict[str, Any], edit: Edit) -> dict[str, Any]:
    """The recorded completion with its message replaced as the edit says."""
    response: dict[str, Any] = (
        copy.deepcopy(recorded) if recorded else {"object": "chat.completion"}
    )
    choices = response.get("choices") or [{"index": 0}]
    first = dict(choices[0])
    message = reply_message(recorded, edit.output, edit.tool_calls, edit.tool_call_changes)
    first["message"] = message
    first["finish_reason"] = "tool_calls" if message.get("tool_calls") else "stop"
    response["choices"] = [first]
    response["id"] = str(response.get("id") or "chatcmpl-faultfinder") + "-edited"
    return response
