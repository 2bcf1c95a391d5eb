"""One distribution_ms for every result: linear percentiles, population std, stated rounding."""

from __future__ import annotations

import pytest

from harness.contract.distribution import distribution_ms, token_summary


def test_linear_percentiles_and_population_std():
    s = distribution_ms([4.0, 1.0, 3.0, 2.0])
    assert s["n"] == 4 and s["min"] == 1.0 and s["max"] == 4.0 and s["mean"] == 2.5
    assert s["p50"] == pytest.approx(2.5)
    assert s["p95"] == pytest.approx(3.85)  # rank 0.95 * 3 = 2.85 -> 3 + 0.85 * (4 - 3)
    assert s["std"] == pytest.approx(1.118034)  # sqrt(1.25), ddof = 0


def test_rounding_and_empty():
    assert distribution_ms([1 / 3], decimals=2)["p99"] == 0.33
    assert distribution_ms([1 / 3])["mean"] == 0.333333
    assert distribution_ms([]) is None


def test_token_summary():
    assert token_summary([3, 1, 2]) == {"min": 1, "max": 3, "mean": 2.0, "total": 6}
    assert token_summary([1, 2])["mean"] == 1.5
    assert token_summary([]) == {"min": 0, "max": 0, "mean": 0.0, "total": 0}
