"""The live and edited calls of a replay: the edit at step ``at``, a tool-result edit
carried into later requests, the live overrides, and the live window that counts them.

:class:`LiveCalls` is the base of :class:`~faultfinder.replay.replayer.ReplayPlan`: the
plan matches each incoming call to the recording, and a call it does not answer from the
recording (step ``at``, a step after it, a call matching nothing once ``at`` was reached,
a divergence under the policy 'live') gets its decision here. What reached the upstream
and what it answered is counted here too, as the proxy reports it. Plain state, called
from the proxy's event loop only.
"""

from __future__ import annotations

import copy
from typing import Any

from faultfinder.errors import ConfigError
from faultfinder.replay.apis import Chains, WireAdapter
from faultfinder.replay.canonical import canonical_reply
from faultfinder.replay.decision import EDIT_ERROR_STATUS, REFUSAL_STATUS, Decision
from faultfinder.replay.edits import Edit, edited_response, tool_result_target
from faultfinder.replay.recorder import Origin, RecordedCall
from faultfinder.replay.replay_options import ReplayOptions
from faultfinder.replay.report import LiveRequest, ReplayReport

__all__ = ["LiveCalls"]


class LiveCalls:
    """Decides the calls of a replay that go live or carry the edit, and counts what the
    upstream answered."""

    def __init__(self, options: ReplayOptions, report: ReplayReport) -> None:
        self.options = options
        self.report = report
        self._at_reached = False
        self._live_started = 0
        self._live_done = 0
        self._tool_result: tuple[str, str] | None = None
        """(tool call id, new content) once a tool-result edit is active."""

    # --- step ``at`` and live calls ------------------------------------------------------

    def _at_step(
        self, adapter: WireAdapter, recorded: RecordedCall, step: int, body: dict[str, Any]
    ) -> Decision:
        self._at_reached = True
        self.report.at_reached = True
        edit = self.options.edit
        if edit is None:
            return self._live(adapter, body, "live", recorded, step, "re-run live from this step")
        try:
            decision = self._apply_edit(adapter, edit, recorded, step, body)
        except (ConfigError, ValueError) as exc:
            # Checked before the program ran (edit_problem), so this is rare: the program
            # gets an error no client retries, saying why, and the report says so too.
            reason = str(exc)
            self.report.edit_applied = False
            self.report.edit_error = reason
            self.report.refused_calls += 1
            return Decision(
                "reject",
                "edited",
                recorded,
                step,
                status=EDIT_ERROR_STATUS,
                message=f"faultfinder replay: the edit at step {step} cannot be applied: {reason}",
                note="edit not applied",
            )
        # A served edit is applied now; one sent upstream (an edited request, a request
        # carrying the edited tool result) once the upstream answered it (live_finished).
        if decision.action == "serve" and decision.edited:
            self.report.edit_applied = True
        return decision

    def _apply_edit(
        self,
        adapter: WireAdapter,
        edit: Edit,
        recorded: RecordedCall,
        step: int,
        body: dict[str, Any],
    ) -> Decision:
        if edit.kind == "input":
            assert edit.input is not None
            changed = adapter.edit_input(body, edit.input, edit.input_mode)
            return self._live(adapter, changed, "edited-input", recorded, step, "edited request")
        if edit.kind == "tool_result":
            return self._tool_result_at_step(adapter, recorded, step, body)
        response = edited_response(recorded, edit)
        self._count_live_done()
        return Decision(
            "serve", "edited", recorded, step, response=response, note="edited reply", edited=True
        )

    def _tool_result_at_step(
        self, adapter: WireAdapter, recorded: RecordedCall, step: int, body: dict[str, Any]
    ) -> Decision:
        # From this step on, every request carrying the result gets the edited one. If the
        # step's own request carries it, the step goes live; if the step's reply makes the
        # call, that reply is served and the edit lands on the request sending the result.
        edit = self.options.edit
        assert edit is not None and edit.tool_result is not None
        reply = canonical_reply(recorded)
        self._tool_result = (
            tool_result_target(edit.tool_result, reply.message if reply else None),
            edit.tool_result.content,
        )
        if adapter.rewrite_tool_result(body, *self._tool_result) is not None:
            return self._live(adapter, body, "edited-input", recorded, step, "edited tool result")
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
        adapter: WireAdapter,
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
                status=REFUSAL_STATUS,
                message="faultfinder replay: the live window is used up; the program is stopped",
                stop=True,
            )
        self._live_started += 1
        if self._tool_result is not None:
            rewritten = adapter.rewrite_tool_result(body, *self._tool_result)
            if rewritten is not None:
                body, origin = rewritten, "edited-input"
                note = note or "edited tool result"
        if self.options.live_overrides:
            body = adapter.for_upstream(
                body,
                Chains(),
                overrides=self.options.live_overrides,
                stream_usage=False,
                expand=False,
            )
        edited = origin == "edited-input"
        return Decision("live", origin, recorded, step, body=body, note=note, edited=edited)

    # --- what reached the upstream -------------------------------------------------------

    def sent_live(self, request: LiveRequest) -> None:
        """A request was sent to the upstream (called by the proxy, for every path)."""
        self.report.live_calls += 1
        if request.background is not None:
            self.report.background_requests += 1
        elif request.api is None:
            self.report.passthrough_calls += 1
        self.report.live.append(request)

    def blocked(self, request: LiveRequest) -> None:
        """A non-model request was refused: no upstream was named on the command line."""
        self.report.blocked.append(request)

    # --- progress ----------------------------------------------------------------------

    def _count_live_done(self) -> None:
        # The edited step opens the live window as the first of its steps.
        self._live_started += 1
        self.live_finished()

    def live_finished(self, decision: Decision | None = None) -> None:
        """A live call completed: the upstream answered it (called by the proxy, with the
        call's decision). An edited call that completed makes the edit applied."""
        if decision is not None and decision.edited:
            self.report.edit_applied = True
        self._live_done += 1
        limit = self.options.stop_after_live
        if limit is not None and self._live_done >= limit:
            self.report.window_reached = True

    def call_failed(self, decision: Decision) -> None:
        """A call got no reply: it does not use up the live window."""
        if decision.action == "live" and self._live_started > 0:
            self._live_started -= 1

    @property
    def should_stop(self) -> bool:
        """The live window is used up: the program can be stopped."""
        return self.report.window_reached
