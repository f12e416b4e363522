"""What the replay plan decides for one incoming call (:class:`Decision`), and the
statuses of the errors it answers with itself.

Plain data, shared by :mod:`faultfinder.replay.replayer` (which decides) and the proxy
(which carries the decision out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from faultfinder.replay.recorder import Origin, RecordedCall

REFUSAL_STATUS = 422
"""Status of a refused replay call. OpenAI's SDK (and SDK-based frameworks) retry 408,
409, 429 and 5xx; 422 is not retried, and ``x-should-retry: false`` says so explicitly."""

EDIT_ERROR_STATUS = 400
"""Status of the call at step ``at`` when its edit cannot be applied (a bad request, not
retried: ``x-should-retry: false``)."""


@dataclass
class Decision:
    """What to do with one incoming call."""

    action: Literal["serve", "live", "reject", "error"]
    """'error': answer with the error the recorded failed call ``recorded`` got."""
    origin: Origin
    recorded: RecordedCall | None = None
    """The recorded step the call was matched to (or failed call), if any."""
    step: int | None = None
    """That step's trace index."""
    response: dict[str, Any] | None = None
    """For 'serve': the reply to send."""
    body: dict[str, Any] | None = None
    """For 'live': the request to send upstream."""
    status: int = 200
    message: str = ""
    note: str | None = None
    stop: bool = False
    """Stop the program after answering (the live window is used up)."""
    edited: bool = False
    """The call carries the edit (its request, or its reply, was changed)."""
    key: tuple[str, str] | None = None
    """(agent, request hash) of a call matched to a recorded step."""
    ordinal: int | None = None
    """Its ordinal among identical requests (the one given back when it fails)."""
    learned: tuple[str, ...] = ()
    """Secrets the call was found to hold where the recording says ``[REDACTED]``
    (:mod:`faultfinder.replay.rescrubbed`): to be scrubbed from what the replay writes."""
