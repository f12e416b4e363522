"""Paired tests and intervals shared by the bench scripts (figures, not the product).

* :func:`mcnemar` — the exact (binomial) McNemar test of two rankers scored on the same
  traces: only the discordant traces count (one right, the other wrong); under the null
  hypothesis each discordant trace is a fair coin, so the two-sided p-value is
  ``min(1, 2 * P(Binomial(b + c, 1/2) <= min(b, c)))``.
* :func:`wilson` — the 95% Wilson score interval (the one ``faultfinder report`` uses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.eval.metrics import wilson

__all__ = ["Paired", "cell", "mcnemar", "paired", "wilson"]


def mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    low = min(b, c)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """Two rankers' hits on the same traces."""

    n: int
    hits_a: int
    hits_b: int
    only_a: int
    """Traces ``a`` gets right and ``b`` wrong."""
    only_b: int

    @property
    def p(self) -> float:
        return mcnemar(self.only_a, self.only_b)

    def text(self) -> str:
        """'+9/−3, p = 0.146' (a's extra hits, b's extra hits, exact McNemar)."""
        return f"+{self.only_a}/−{self.only_b}, p {fmt_p(self.p)}"


def paired(a: Sequence[bool], b: Sequence[bool]) -> Paired:
    """Hits of ``a`` and ``b`` on the same traces (same order)."""
    assert len(a) == len(b)
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    return Paired(len(a), sum(a), sum(b), only_a, only_b)


def fmt_p(p: float) -> str:
    """'= 0.161' or '< 0.001'."""
    if p < 0.001:
        return "< 0.001"
    return f"= {p:.3f}"


def cell(hits: float, n: int, ci: bool = True) -> str:
    """'35.7 [28–44]': a percentage with its 95% Wilson interval."""
    if not n:
        return "-"
    text = f"{100 * hits / n:.1f}"
    if ci:
        lo, hi = wilson(hits, n)
        text += f" [{100 * lo:.0f}–{100 * hi:.0f}]"
    return text
