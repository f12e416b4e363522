"""Errors a user can act on. Every message says what went wrong and what to do next."""

from __future__ import annotations


class FaultfinderError(Exception):
    """Base class for errors faultfinder reports to the user without a traceback."""


class TraceFormatError(FaultfinderError):
    """A trace file could not be read. Names the file, the field and the reason."""

    def __init__(self, path: str, field: str, reason: str) -> None:
        self.path = path
        self.field = field
        self.reason = reason
        super().__init__(f"{path}: field '{field}': {reason}")


class FaultfinderWarning(UserWarning):
    """Something the user should know that did not stop the command; shown as one line."""


class TraceFormatWarning(FaultfinderWarning):
    """A trace file was read, but part of it was not understood (an unknown key, kept in
    metadata). ``--strict`` turns these into TraceFormatError."""


class UnknownNameError(FaultfinderError):
    """A name (method, model backend, importer...) is not registered."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        import difflib

        close = difflib.get_close_matches(name, self.known, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        super().__init__(
            f"Unknown {kind} '{name}'.{hint} Available: {', '.join(self.known) or '(none)'}."
        )


class ModelNotAvailableError(FaultfinderError):
    """A model backend cannot be used here (missing extra, missing key, missing weights)."""


class ModelRequestsForbiddenError(FaultfinderError):
    """A real model was asked while requests are forbidden (tests)."""

    def __init__(self, backend: str) -> None:
        super().__init__(
            f"Model request to '{backend}' refused: real model requests are disabled "
            "(faultfinder.llm.ALLOW_MODEL_REQUESTS is False). Use a scripted or function "
            "model in tests, or mark the test as smoke."
        )


class BudgetExceededError(FaultfinderError):
    """The token or call budget would be overspent by the next request."""


class CaseBudgetExceededError(BudgetExceededError):
    """One case's own token budget (``--budget-tokens``) would be overspent: that case is
    recorded 'budget-exceeded' and the batch goes on (the run-wide budget stops it)."""


class LLMCallError(FaultfinderError):
    """The model endpoint kept failing after all retries."""

    sent: bool | None = None
    """Whether the request went out before it failed (a timeout, an error reply): the
    call is then counted as made, since the endpoint may have done the work. A backend
    sets False when it knows nothing was sent (no connection); None: the LLM layer
    decides (sent once an attempt started)."""


class EndpointSetupError(LLMCallError):
    """The endpoint refused what every call of the run shares, not one request: the key
    (401), or the model name or URL (404). Every other call would be refused the same way,
    so ``eval`` stops at the first one instead of trying each case. (A 403 may be about
    one request's content, a gateway's moderation: it stays that case's error.)"""


class ConfigError(FaultfinderError):
    """A method or run configuration is invalid."""


class EnvironmentValueError(ConfigError):
    """A variable of the environment that stands in for an option holds a value that
    cannot work (``OPENAI_BASE_URL`` that is no http(s) URL with a host). The message
    names the variable and why, never the value (a URL may hold a password); the CLI
    treats it as a bad command line, exit 2, before any case runs."""
