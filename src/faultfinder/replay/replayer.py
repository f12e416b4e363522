"""Replay decisions: which recorded answer (or edit, or live call) each incoming call gets.

A replay re-runs the same program through the proxy. Each incoming call is matched to a
recorded call by its content: the agent, the hash of its normalised request, and its
ordinal among identical requests (see :mod:`faultfinder.replay.matching`). Arrival order
does not matter, so concurrent fan-outs and agents interleaved across threads replay
faithfully.

- a matched call before step ``at`` (or anywhere, without ``at``) is answered from the
  recording;
- at step ``at``: the edited output is served (``Edit.output``), or the edited request
  is sent to the upstream (``Edit.input``), or, with no edit, the step is re-run live;
- a call matching a recorded step after ``at``, or matching nothing once step ``at`` was
  reached, goes to the upstream live;
- a call matching nothing before that is a divergence: reported with a diff against the
  nearest recorded call, and by default refused with an error no client retries (HTTP
  422, ``x-should-retry: false``), so the program fails on its own and shows where. It
  never gets a recorded reply to a different request, and nothing goes live unless the
  policy is 'live'.

A call that gets no reply (an upstream error, an unreachable upstream, a stream cut
short: :meth:`ReplayPlan.call_failed`) is not a step, as in a recording: the step it was
matched to is open again, so the program's retry of the same request is that step. The
retry of step ``at`` gets the edit again, and the edit counts as applied only once a call
carrying it was answered.

A call that failed while recording with an error reply (4xx/5xx) gets that error again,
in recorded order among identical requests, before step ``at`` only
(:mod:`faultfinder.replay.failures`).

The plan is plain state, called from the proxy's event loop only. This module matches
each call to the recording; what a call that goes live or carries the edit gets, and the
live window, are its base class's (:class:`~faultfinder.replay.live_calls.LiveCalls`).
What it is asked to do is a :class:`~faultfinder.replay.replay_options.ReplayOptions`
(re-exported here); what it did is a :class:`~faultfinder.replay.report.ReplayReport`
(``report.json``).
"""

from __future__ import annotations

import bisect
import copy
from typing import Any

from faultfinder.replay.apis import WireAdapter
from faultfinder.replay.apis.chat import ChatAdapter
from faultfinder.replay.canonical import canonical_requests
from faultfinder.replay.decision import EDIT_ERROR_STATUS, REFUSAL_STATUS, Decision
from faultfinder.replay.edits import Edit, edit_problem, edited_response
from faultfinder.replay.failures import RecordedFailures
from faultfinder.replay.live_calls import LiveCalls
from faultfinder.replay.matching import first_difference, hash_normalised, request_diff
from faultfinder.replay.proxy_background import never_answered
from faultfinder.replay.recorder import RecordedCall
from faultfinder.replay.replay_options import DivergencePolicy, ReplayOptions
from faultfinder.replay.report import Divergence, ReplayReport
from faultfinder.replay.rescrubbed import RedactedRequests, likely_fills

__all__ = [
    "EDIT_ERROR_STATUS",
    "REFUSAL_STATUS",
    "Decision",
    "DivergencePolicy",
    "Edit",
    "ReplayOptions",
    "ReplayPlan",
    "apply_input_edit",
    "edit_problem",
    "edited_response",
    "recorded_steps",
]


def recorded_steps(recorded: list[RecordedCall]) -> list[RecordedCall]:
    """A recording's steps in order: its answered calls (a failed call is not a step), so
    ``recorded_steps(calls)[K]`` is the call ``--at K`` names."""
    return sorted((c for c in recorded if c.ok), key=lambda c: c.call)


class ReplayPlan(LiveCalls):
    """Decides each incoming call of a replay against a recording."""

    def __init__(self, recorded: list[RecordedCall], options: ReplayOptions) -> None:
        self.recorded = recorded_steps(recorded)
        if options.at is not None and not self.recorded:
            raise ValueError(
                f"step {options.at} is outside the recording: it has no steps (the program "
                "made no model call that was answered), so there is no step to edit or go "
                "live from; replay it without --at"
            )
        if options.at is not None and options.at >= len(self.recorded):
            raise ValueError(
                f"step {options.at} is outside the recording (steps 0..{len(self.recorded) - 1})"
            )
        if options.at is not None and options.edit is not None:
            problem = edit_problem(self.recorded[options.at], options.edit)
            if problem is not None:
                raise ValueError(f"the edit cannot be applied at step {options.at}: {problem}")
        self.matcher = options.matcher()
        self._fields: dict[str, set[str]] = {}
        self.canonical = canonical_requests(self.recorded)
        self.agents = [
            self._recorded_agent(c, r) for c, r in zip(self.recorded, self.canonical, strict=True)
        ]
        self.normalised = [self.matcher.normalise(c, self._fields) for c in self.canonical]
        self.hashes = [hash_normalised(n) for n in self.normalised]
        self.by_content: dict[tuple[str, str], list[int]] = {}
        self.redacted = RedactedRequests()
        """Recorded requests holding ``[REDACTED]``, for calls matching none exactly."""
        for step, key in enumerate(zip(self.agents, self.hashes, strict=True)):
            self.by_content.setdefault(key, []).append(step)
            self.redacted.add(*key, self.normalised[step])
        self.failures = RecordedFailures()
        """Recorded calls that failed (not steps): answered again when their error reply
        was kept, else named when a call matches only one of them."""
        every = sorted(recorded, key=lambda c: c.call)
        for call, request in zip(every, canonical_requests(every), strict=True):
            if not call.ok:
                normalised = self.matcher.normalise(request, {})
                key = (self._recorded_agent(call, request), hash_normalised(normalised))
                self.redacted.add(*key, normalised)
                steps = [self.recorded[step].call for step in self.by_content.get(key, [])]
                self.failures.add(key, call, steps)
        self._ordinals: dict[tuple[str, str], int] = {}
        self._released: dict[tuple[str, str], list[int]] = {}
        """Ordinals of matched calls that got no reply, smallest first: the next identical
        request (the program's retry) takes them again."""
        self._agent_calls: dict[str, int] = {}
        self.live_agents: set[str] = set()
        prefix = len(self.recorded) if options.at is None else options.at
        report = ReplayReport(
            recorded_steps=len(self.recorded),
            at=options.at,
            prefix_steps=prefix,
            edit=options.edit.describe() if options.edit else None,
            normalisers=[*options.normalisers, *(["mask"] if options.masks else [])],
        )
        super().__init__(options, report)
        self._claimed: set[int] = set()
        self._served: set[int] = set()

    def _recorded_agent(self, call: RecordedCall, canonical: dict[str, Any]) -> str:
        # An agent known by its system prompt is named again with this replay's
        # normalisers and masks, as incoming calls are.
        if call.agent_source == "system-prompt":
            return self.matcher.agent(None, None, canonical)[0]
        return call.agent

    def agent(
        self, header: str | None, path_agent: str | None, body: dict[str, Any]
    ) -> tuple[str, str]:
        """The calling agent of an incoming call, named as the recording's agents are."""
        return self.matcher.agent(header, path_agent, body)

    # --- decisions -------------------------------------------------------------------

    def decide(
        self,
        agent: str,
        body: dict[str, Any],
        compare: dict[str, Any] | None = None,
        adapter: WireAdapter | None = None,
    ) -> Decision:
        """The decision for a call of ``agent`` asking ``body`` (in ``adapter``'s wire
        format; Chat Completions by default).

        ``compare`` is the canonical request as it would be recorded (credentials
        scrubbed), used for matching; ``body`` is what would be sent upstream.
        """
        adapter = adapter or _CHAT
        self.report.apis[adapter.name] = self.report.apis.get(adapter.name, 0) + 1
        compare = body if compare is None else compare
        normalised = self.matcher.normalise(compare, self._fields)
        got = hash_normalised(normalised)
        learned: list[str] = []
        if (agent, got) not in self.by_content and not self.failures.holds((agent, got)):
            # A recorded call scrubbed again once a secret it holds was learned?
            got, learned = self.redacted.find(agent, normalised) or (got, [])
        decision = self._decide(adapter, agent, body, normalised, got)
        decision.learned = (*learned, *decision.learned)
        return decision

    def _decide(
        self,
        adapter: WireAdapter,
        agent: str,
        body: dict[str, Any],
        normalised: dict[str, Any],
        got: str,
    ) -> Decision:
        number = self._agent_calls.get(agent, 0)
        self._agent_calls[agent] = number + 1
        key = (agent, got)
        released = self._released.get(key)
        if released:
            # The retry of a call that got no reply: the same step again.
            ordinal = released.pop(0)
        else:
            ordinal = self._ordinals.get(key, 0)
            failed = self._failed_again(agent, key, ordinal)
            if failed is not None:
                return failed
            self._ordinals[key] = ordinal + 1
        candidates = self.by_content.get(key, [])
        if ordinal >= len(candidates):
            if self._at_reached:
                self.report.extra_calls += 1
                return self._live(adapter, body, "live", None, None, "no recorded call matches")
            return self._diverged(adapter, agent, number, normalised, got, body, key)
        step = candidates[ordinal]
        self._claimed.add(step)
        decision = self._matched(adapter, agent, step, body)
        decision.key, decision.ordinal = key, ordinal
        return decision

    def _failed_again(self, agent: str, key: tuple[str, str], ordinal: int) -> Decision | None:
        """The recorded error this call gets again, if any: a failure recorded before
        step ``at``'s call, for an agent that has not gone live."""
        at = self.options.at
        before = None if at is None else self.recorded[at].call
        failure = None if agent in self.live_agents else self.failures.next(key, ordinal, before)
        if failure is None:
            return None
        self.report.served_failures.append(failure.call)
        note = f"recorded failed call {failure.call} answered again with its error"
        message = failure.error or f"status {failure.status}"
        return Decision(
            "error", "cached", failure, status=failure.status, message=message, note=note
        )

    def _matched(
        self, adapter: WireAdapter, agent: str, step: int, body: dict[str, Any]
    ) -> Decision:
        recorded = self.recorded[step]
        at = self.options.at
        if agent in self.live_agents or (at is not None and step > at):
            return self._live(adapter, body, "live", recorded, step)
        if at is not None and step == at:
            return self._at_step(adapter, recorded, step, body)
        self._served.add(step)
        self.report.served_steps.append(step)
        self.report.reproduced += 1
        return Decision(
            "serve", "cached", recorded, step, response=copy.deepcopy(recorded.response)
        )

    def _nearest(self, agent: str) -> int | None:
        """The recorded step a diverged call is compared with: the agent's first step not
        yet matched, else the first unmatched step of any agent."""
        open_steps = [i for i in range(len(self.recorded)) if i not in self._claimed]
        mine = [i for i in open_steps if self.agents[i] == agent]
        candidates = mine or open_steps
        return candidates[0] if candidates else None

    def _diverged(
        self,
        adapter: WireAdapter,
        agent: str,
        number: int,
        normalised: dict[str, Any],
        got: str,
        body: dict[str, Any],
        key: tuple[str, str],
    ) -> Decision:
        step = self._nearest(agent)
        failed = None if key in self.by_content else self.failures.without_reply(key)
        why = "The program diverged from the recording on its own; pin its sources of "
        why += "nondeterminism (see docs/replay.md), mask volatile text with --mask, or "
        if failed is not None:
            # Not the program's doing: the recording has no reply for this request.
            step, why = None, "Record the run again if an older faultfinder made it, or "
            if never_answered(failed.request, failed.error, failed.error_body is not None):
                # Recording it again records the same: a cancel or a stop, not a reply.
                why = (
                    "A background call cancelled or left before it finished keeps no "
                    "reply, and a replay never makes one up; replay from a step before it "
                    "with --at (it then goes live), or "
                )
            difference = (
                f"its request was recorded only as a failed call (call {failed.call}: "
                f"{failed.error or f'status {failed.status}'}), which has no reply to replay"
            )
            diff = None
        elif step is None:
            difference = (
                "a call beyond the recording (every recorded call was already matched)"
                if self.recorded
                else "the recording holds no model call to answer it"
            )
            diff = None
        else:
            difference = first_difference(self.normalised[step], normalised) or (
                f"same request as recorded step {step} (agent {self.agents[step]!r})"
                if self.agents[step] != agent
                else f"an extra repeat of recorded step {step}"
            )
            diff = request_diff(self.normalised[step], normalised)
        refuse = self.options.on_divergence == "fail"
        # What stands where the nearest recorded request had a secret scrubbed: quoted by
        # the diff and the refusal, and written with the call, so scrubbed from them all.
        learned = () if step is None else tuple(likely_fills(self.normalised[step], normalised))
        self.report.divergences.append(
            Divergence(
                step=step,
                agent=agent,
                agent_call=number,
                expected_hash=None if step is None else self.hashes[step],
                got_hash=got,
                difference=difference,
                diff=diff,
                action="refused" if refuse else "went live",
            )
        )
        detail = difference if step is None else f"nearest recorded step {step}: {difference}"
        note = f"matches no recorded call; {detail}"
        recorded = None if step is None else self.recorded[step]
        if refuse:
            self.report.refused_calls += 1
            refusal = Decision(
                "reject",
                "live",
                recorded,
                step,
                status=REFUSAL_STATUS,
                message=(
                    f"faultfinder replay: this call by agent '{agent}' (its call {number}) "
                    f"matches no recorded call ({detail}). {why}replay with --on-divergence "
                    "live."
                ),
                note=note,
            )
            refusal.learned = learned
            return refusal
        self.live_agents.add(agent)
        went = self._live(adapter, body, "live", recorded, step, note)
        went.learned = learned
        return went

    def call_failed(self, decision: Decision) -> None:
        """A call got no reply (the upstream answered with an error or was unreachable, its
        stream was cut short, the call was refused): it is not a step, as failed calls are
        not in a recording. The recorded step it was matched to is open again, so the
        program's retry of the same request is matched to that step: the retry of step
        ``at`` carries the edit, as the first try did. Nor does it use up the live window.
        Called by the proxy."""
        super().call_failed(decision)
        if decision.key is None or decision.ordinal is None:
            return
        bisect.insort(self._released.setdefault(decision.key, []), decision.ordinal)
        if decision.step is not None:
            self._claimed.discard(decision.step)

    def finish(self) -> ReplayReport:
        """The final report (missing prefix steps filled in)."""
        prefix = self.report.prefix_steps
        self.report.missing_steps = [i for i in range(prefix) if i not in self._served]
        self.report.normalised_fields = {k: sorted(v) for k, v in sorted(self._fields.items())}
        return self.report


_CHAT = ChatAdapter()


def apply_input_edit(body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
    """A chat request with its instruction edited (see ``WireAdapter.edit_input``)."""
    return _CHAT.edit_input(body, text, mode)
