"""What a replay is asked to do: :class:`ReplayOptions`.

The step a replay goes live from, the edit applied there, what happens to a call that
matches no recorded call, how requests are normalised for matching, the live window and
the parameters forced on live calls. The options are plain, validated data: the commands,
DoVer, TraceElephant's dynamic check and the benchmarks build them without the replay
machinery, and :class:`~faultfinder.replay.replayer.ReplayPlan` (which decides each call
of a replay by them) takes them. Importable from :mod:`faultfinder.replay.replayer` too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from faultfinder.replay.edits import Edit
from faultfinder.replay.matching import DEFAULT_NORMALISERS, Matcher, check_normalisers

__all__ = ["DivergencePolicy", "ReplayOptions"]


DivergencePolicy = Literal["fail", "live"]


class ReplayOptions(BaseModel):
    """How a replay treats the recording."""

    at: int | None = Field(default=None, ge=0)
    """Step (canonical 0-based trace index) from which the run goes live; None replays
    every recorded call and only calls beyond the recording go live."""
    edit: Edit | None = None
    """The change applied at step ``at``."""
    on_divergence: DivergencePolicy = "fail"
    """A call matching no recorded call before step ``at`` is reached: 'fail' refuses it
    (HTTP 422 with ``x-should-retry: false``: clients raise instead of retrying); 'live' sends it to
    the upstream and carries on live for that agent. Either way it is reported."""
    masks: list[str] = Field(default_factory=list)
    """Regular expressions whose matches in request text are ignored when matching calls
    and naming agents (volatile text the built-in normalisers miss)."""
    normalisers: list[str] = Field(default_factory=lambda: list(DEFAULT_NORMALISERS))
    """Built-in normalisers of volatile text (timestamps, uuids, temp-paths, pids) applied
    when matching calls and naming agents; see faultfinder.replay.matching.NORMALISERS."""
    stop_after_live: int | None = Field(default=None, ge=1)
    """Stop the program once this many steps from ``at`` on (the edited step included)
    have completed: an observation window, as in TraceElephant's dynamic check."""
    live_overrides: dict[str, Any] = Field(default_factory=dict)
    """Request parameters forced on live calls (e.g. {"temperature": 0.3}), where the
    call's API has them (the Responses and Messages APIs have no ``seed``)."""

    @field_validator("normalisers")
    @classmethod
    def _known_normalisers(cls, value: list[str]) -> list[str]:
        return list(check_normalisers(value))

    def matcher(self) -> Matcher:
        """The request normalisation these options ask for."""
        return Matcher(tuple(self.normalisers), tuple(self.masks))

    @model_validator(mode="after")
    def _edit_needs_step(self) -> ReplayOptions:
        if self.edit is not None and self.at is None:
            raise ValueError("an edit needs the step it applies to (--at)")
        return self
