"""Exit codes of every faultfinder command, in one place (documented in docs/exit-codes.md).

A command that ran to the end exits 0 only when every case got a readable verdict
('ok' or 'no-error-found'). Otherwise the most serious condition decides, and the counts
go to stderr in one line:

====  =====================================================================
code  meaning
====  =====================================================================
0     every case answered ('ok' or 'no-error-found')
1     the command could not run: bad input file, bad configuration, ...
2     bad command line (unknown option, out-of-range number): click's code
3     at least one case stayed 'unparsed' (the model's answer was unreadable)
4     at least one case errored ('error': endpoint failed after retries, a bug)
5     the token or call budget ran out ('budget-exceeded'; cases left undone)
====  =====================================================================

Precedence when several apply: 5, then 4, then 3.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK = 0
"""Every case answered."""
FAILURE = 1
"""The command could not run (one-line error on stderr)."""
USAGE = 2
"""Bad command line (click's usage error)."""
UNPARSED = 3
"""Some case's answer stayed unparsed after retries."""
ERRORED = 4
"""Some case errored: the endpoint failed after retries, or a method raised."""
BUDGET_EXCEEDED = 5
"""The token or call budget ran out before every case finished."""
PIPE_CLOSED = 141
"""The output's reader stopped reading (``| head``): 128 + SIGPIPE, as a shell reports a
program stopped by that signal. The command's work up to then is done; nothing is shown."""

UNPARSED_STATUSES = frozenset({"unparsed", "fallback"})
"""Statuses counted as unparsed ('fallback': CHIEF used a structural default instead)."""


@dataclass(frozen=True)
class CaseCounts:
    """How many cases of a run ended in each condition that makes the exit non-zero."""

    total: int
    unparsed: int = 0
    errored: int = 0
    budget_exceeded: int = 0

    @classmethod
    def of(cls, statuses: Iterable[str]) -> CaseCounts:
        """Count verdict (or stage) statuses."""
        items = list(statuses)
        return cls(
            total=len(items),
            unparsed=sum(s in UNPARSED_STATUSES for s in items),
            errored=sum(s == "error" for s in items),
            budget_exceeded=sum(s == "budget-exceeded" for s in items),
        )

    @property
    def exit_code(self) -> int:
        if self.budget_exceeded:
            return BUDGET_EXCEEDED
        if self.errored:
            return ERRORED
        if self.unparsed:
            return UNPARSED
        return OK

    def message(self, noun: str = "case") -> str:
        """One line for stderr, e.g. 'exit 4: of 10 cases, 2 errored, 1 unparsed'."""
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.budget_exceeded, "ran out of budget"),
                (self.errored, "errored"),
                (self.unparsed, "unparsed"),
            )
            if n
        ]
        plural = noun if self.total == 1 else noun + "s"
        return f"exit {self.exit_code}: of {self.total} {plural}, " + ", ".join(parts)
