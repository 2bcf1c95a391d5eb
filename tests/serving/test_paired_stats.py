"""Paired-effect statistics and decision rules, on hand-made samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.errors import InvalidInput
from harness.bench.stats import decide, paired_ratio_effect


def samples(center: float, n: int, seed: int, spread: float = 0.05) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_estimate_is_geometric_mean_of_per_repeat_median_ratios():
    pairs = [([100.0, 110.0, 90.0], [50.0, 40.0, 60.0]), ([200.0, 200.0, 200.0], [50.0, 50.0, 50.0])]
    eff = paired_ratio_effect(pairs, resamples=200, seed=1)
    assert eff.per_repeat == pytest.approx((0.5, 0.25))
    assert eff.value == pytest.approx(math.sqrt(0.5 * 0.25))
    assert eff.ci_low <= eff.value <= eff.ci_high


def test_clear_gain_is_adopted_with_three_repeats():
    pairs = [(samples(900, 8, r), samples(150, 8, 100 + r)) for r in range(3)]
    eff = paired_ratio_effect(pairs, resamples=2000, seed=0)
    assert 0.1 < eff.ci_low <= eff.value <= eff.ci_high < 0.3
    verdict = decide(eff, better="lower")
    assert (verdict.evidence_level, verdict.decision) == ("paired", "adopt")


def test_clear_loss_is_rejected():
    pairs = [(samples(100, 8, r), samples(300, 8, 50 + r)) for r in range(3)]
    verdict = decide(paired_ratio_effect(pairs, resamples=2000, seed=0), better="lower")
    assert verdict.decision == "reject"


def test_no_effect_is_inconclusive():
    pairs = [(samples(500, 8, r, 0.3), samples(500, 8, 70 + r, 0.3)) for r in range(3)]
    eff = paired_ratio_effect(pairs, resamples=2000, seed=0)
    assert eff.ci_low < 1.0 < eff.ci_high
    assert decide(eff).decision == "inconclusive"


def test_fewer_repeats_lower_the_evidence_and_cap_the_decision():
    pairs = [(samples(900, 8, r), samples(150, 8, 100 + r)) for r in range(2)]
    verdict = decide(paired_ratio_effect(pairs, resamples=1000, seed=0))
    assert verdict.evidence_level == "single" and verdict.decision == "inconclusive"
    assert "only 2 interleaved repeat" in verdict.reason and "excludes 1" in verdict.reason


def test_seeded_interval_is_reproducible():
    pairs = [(samples(900, 8, r, 0.3), samples(600, 8, 9 + r, 0.3)) for r in range(3)]
    a = paired_ratio_effect(pairs, resamples=500, seed=7)
    b = paired_ratio_effect(pairs, resamples=500, seed=7)
    c = paired_ratio_effect(pairs, resamples=500, seed=8)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)


def test_higher_is_better_direction():
    pairs = [(samples(100, 8, r), samples(300, 8, 50 + r)) for r in range(3)]
    assert decide(paired_ratio_effect(pairs, resamples=1000, seed=0), better="higher").decision == "adopt"


@pytest.mark.parametrize("pairs", [[], [([], [1.0])], [([1.0], [0.0])]])
def test_unusable_samples_are_input_errors(pairs):
    with pytest.raises(InvalidInput):
        paired_ratio_effect(pairs, resamples=10)
