"""Reliability bins and expected calibration error of stated confidences."""

from __future__ import annotations

import pytest

from faultfinder.eval.reliability import ece, markdown, reliability


def test_bins_count_confidence_and_accuracy() -> None:
    pairs = [(0.05, False), (0.95, True), (0.91, False), (1.0, True)]
    table = reliability(pairs, bins=10)
    assert [b.count for b in table] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    top = table[-1]
    assert top.confidence == pytest.approx((0.95 + 0.91 + 1.0) / 3)
    assert top.accuracy == pytest.approx(2 / 3)
    expected = (1 * 0.05 + 3 * abs(2 / 3 - top.confidence)) / 4
    assert ece(table) == pytest.approx(expected)
    assert "| 0.9–1.0 | 3 |" in markdown(table)


def test_perfectly_calibrated_has_zero_ece() -> None:
    pairs = [(0.5, True), (0.5, False)] * 5
    assert ece(reliability(pairs)) == pytest.approx(0.0)
