"""Paired-effect statistics and decision rules (harness.bench.stats), on hand-made samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.startcontrol import satterthwaite, with_start_variance
from harness.bench.stats import (
    RepeatSamples,
    binomial_upper,
    control_margin,
    decide,
    equivalent,
    holm,
    min_requests,
    p_beyond,
    paired_ratio_effect,
    repeat_ratio_effect,
    sign_flip_p,
    t_cdf,
    t_quantile,
)
from harness.errors import InvalidInput


def samples(center: float, n: int, seed: int, spread: float = 0.05) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_estimate_is_geometric_mean_of_per_repeat_median_ratios():
    pairs = [([100.0, 110.0, 90.0], [50.0, 40.0, 60.0]), ([200.0, 200.0, 200.0], [50.0, 50.0, 50.0])]
    eff = paired_ratio_effect(pairs, resamples=200, seed=1)
    assert eff.per_repeat == pytest.approx((0.5, 0.25))
    assert eff.value == pytest.approx(math.sqrt(0.5 * 0.25))
    assert eff.ci_low <= eff.value <= eff.ci_high


def test_student_t_quantiles_match_the_tables():
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_quantile(0.025, 1) == pytest.approx(-12.7062, abs=1e-3)


def test_three_repeats_give_a_t_interval_wider_than_their_range_not_the_range():
    eff = repeat_ratio_effect([(1.0, math.exp(x)) for x in (-0.1, 0.0, 0.1)])
    half = 4.3027 * 0.1 / math.sqrt(3)
    assert (math.log(eff.ci_low), math.log(eff.ci_high)) == pytest.approx((-half, half), abs=1e-4)
    assert eff.ci_low < min(eff.per_repeat) and eff.ci_high > max(eff.per_repeat)
    assert "Student t" in eff.method and "2 df" in eff.method and eff.unit == "repeat"


def test_clear_gain_is_adopted_with_five_repeats_beyond_the_margin():
    pairs = [(samples(900, 8, r), samples(150, 8, 100 + r)) for r in range(5)]
    eff = paired_ratio_effect(pairs, resamples=2000, seed=0)
    assert 0.1 < eff.ci_low <= eff.value <= eff.ci_high < 0.3
    verdict = decide(eff, better="lower", margin=0.05)
    assert (verdict.evidence_level, verdict.decision, verdict.finding) == ("paired", "adopt", "material gain")
    assert eff.p_sign == pytest.approx(1 / 32)


def test_three_repeats_are_single_evidence_and_capped():
    pairs = [(samples(900, 8, r), samples(150, 8, 100 + r)) for r in range(3)]
    verdict = decide(paired_ratio_effect(pairs, resamples=500, seed=0))
    assert (verdict.evidence_level, verdict.decision) == ("single", "inconclusive")
    assert "only 3 repeat" in verdict.reason and "beyond" in verdict.reason


def test_clear_loss_is_rejected():
    pairs = [(samples(100, 8, r), samples(300, 8, 50 + r)) for r in range(5)]
    assert decide(paired_ratio_effect(pairs, resamples=500, seed=0), better="lower").decision == "reject"
    assert decide(paired_ratio_effect(pairs, resamples=500, seed=0), better="higher").decision == "adopt"


def test_a_precise_half_percent_gain_is_no_material_effect_not_an_adopt():
    eff = repeat_ratio_effect([(100.0, 99.5 + 0.01 * r) for r in range(6)])
    assert eff.ci_high < 1.0  # excludes no effect ...
    verdict = decide(eff, better="lower", margin=0.05)
    assert (verdict.decision, verdict.finding) == ("inconclusive", "no material effect")
    assert decide(eff, better="lower", margin=0.0).decision == "adopt"  # ... which a zero margin would adopt


def test_no_effect_is_inconclusive():
    pairs = [(samples(500, 8, r, 0.3), samples(500, 8, 70 + r, 0.3)) for r in range(5)]
    eff = paired_ratio_effect(pairs, resamples=500, seed=0)
    assert eff.ci_low < 1.0 < eff.ci_high
    assert decide(eff).decision == "inconclusive"


def test_cross_start_contrasts_are_repeated_without_a_start_variance_and_start_pooled_with_it():
    eff = repeat_ratio_effect([(100.0, 50.0 + r) for r in range(5)])
    verdict = decide(eff, design="cross-start")
    assert (verdict.evidence_level, verdict.decision) == ("repeated", "inconclusive")
    assert "make bench-00" in verdict.reason
    pooled = with_start_variance(eff, 0.03 ** 2, 10)
    assert (decide(pooled, design="cross-start-pooled").evidence_level,
            decide(pooled, design="cross-start-pooled").decision) == ("start-pooled", "adopt")
    short = with_start_variance(repeat_ratio_effect([(100.0, 50.0 + r) for r in range(3)]), 0.03 ** 2, 10)
    capped = decide(short, design="cross-start-pooled")
    assert (capped.evidence_level, capped.decision) == ("repeated", "inconclusive")
    assert "only 3 repeats" in capped.reason
    assert decide(eff, design="alternating").evidence_level == "paired"


def test_satterthwaite_df_by_hand():
    assert satterthwaite([(1.0, 4), (1.0, 4)]) == pytest.approx(8.0)  # two equal parts: their df add
    assert satterthwaite([(2.0, 5), (0.0, 1)]) == pytest.approx(5.0)  # a part without variance adds nothing
    # 0.7² / (0.5²/9 + 0.2²/3) = 0.49 / 0.0411111
    assert satterthwaite([(0.5, 9), (0.2, 3)]) == pytest.approx(11.91892, rel=1e-5)


def test_the_start_variance_joins_the_interval_with_welch_satterthwaite_df():
    logs = np.log([0.80, 0.83, 0.78, 0.82, 0.81])
    eff = repeat_ratio_effect([(1.0, float(math.exp(x))) for x in logs])
    within = float(np.var(logs, ddof=1)) / 5
    var_start, df_start = 0.02 ** 2, 7.0
    between = 2 * var_start
    df = (within + between) ** 2 / (within ** 2 / 4 + between ** 2 / df_start)
    pooled = with_start_variance(eff, var_start, df_start)
    assert pooled.t_df == pytest.approx(df) and pooled.df == pytest.approx(df)
    half = t_quantile(0.975, df) * math.sqrt(within + between)
    assert math.log(pooled.ci_low) == pytest.approx(logs.mean() - half)
    assert math.log(pooled.ci_high) == pytest.approx(logs.mean() + half)
    assert pooled.value == pytest.approx(eff.value) and pooled.ci_high > eff.ci_high  # wider, same estimate
    assert "Welch–Satterthwaite" in pooled.method and f"{df:.1f} df" in pooled.method
    # p beyond the margin reads the same se and df
    t = (logs.mean() + math.log1p(0.05)) / math.sqrt(within + between)
    assert p_beyond(pooled, better="lower", margin=0.05) == pytest.approx(t_cdf(t, df), abs=1e-9)
    assert with_start_variance(eff, -0.001, 3).ci_low == pytest.approx(eff.ci_low)  # a negative estimate adds nothing


def test_a_refusal_caps_an_adopt():
    eff = repeat_ratio_effect([(100.0, 50.0 + r) for r in range(5)])
    verdict = decide(eff, refuse="p99 of 30 requests is the max of 30")
    assert verdict.decision == "inconclusive" and "max of 30" in verdict.reason


def test_requests_are_resampled_jointly_by_index():
    rng = np.random.default_rng(3)
    base = rng.lognormal(6, 1.0, 40)  # prompts differ a lot; B is 0.8x each prompt
    joint = RepeatSamples({i: (v,) for i, v in enumerate(base)}, {i: (0.8 * v,) for i, v in enumerate(base)})
    unpaired = RepeatSamples({i: (v,) for i, v in enumerate(base)}, {i + 100: (0.8 * v,) for i, v in enumerate(base)})
    j = paired_ratio_effect([joint], resamples=2000, seed=0)
    u = paired_ratio_effect([unpaired], resamples=2000, seed=0)
    assert j.unit == "request" and j.request_ci == pytest.approx((0.8, 0.8))
    assert u.request_ci[1] / u.request_ci[0] > 1.5
    assert "joint" in j.method and "unpaired" in u.method


def test_strata_keep_the_design_hit_miss_mix_in_every_resample():
    a = {i: (1000.0 + i,) for i in range(8)}
    b = {i: (1000.0 + i,) if i < 2 else (40.0 + i,) for i in range(8)}  # 2 misses, 6 hits
    strata = {i: i < 2 for i in range(8)}
    plain = paired_ratio_effect([RepeatSamples(a, b)], resamples=4000, seed=0)
    strat = paired_ratio_effect([RepeatSamples(a, b, strata)], resamples=4000, seed=0)
    assert strat.request_ci[1] < 2 * strat.value < plain.request_ci[1]
    assert "stratified" in strat.method


def test_block_resampling_is_stated():
    pairs = [(samples(100, 30, r), samples(80, 30, 9 + r)) for r in range(2)]
    assert "blocks of 5" in paired_ratio_effect(pairs, resamples=200, block=5).request_design


def test_sign_flip_p_is_exact():
    assert sign_flip_p([-1.0] * 5) == pytest.approx(1 / 32)
    assert sign_flip_p([-1.0] * 3) == pytest.approx(1 / 8)  # no 3-repeat test can reach 0.05
    assert sign_flip_p([-1.0, -2.0, 0.5]) == pytest.approx(2 / 8)


def test_percentiles_need_enough_requests():
    assert (min_requests("p99"), min_requests("p95"), min_requests("median")) == (100, 20, 1)


def test_binomial_bound_on_exceedances():
    assert binomial_upper(0, 100) == pytest.approx(0.0295, abs=1e-4)  # the rule of three
    assert binomial_upper(3, 100) == pytest.approx(0.0757, abs=1e-3)


def test_holm_adjusts_in_input_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_p_beyond_the_margin_follows_the_interval():
    eff = repeat_ratio_effect([(100.0, 50.0 + r) for r in range(5)])
    assert p_beyond(eff, better="lower", margin=0.05) < 0.001
    assert p_beyond(eff, better="higher", margin=0.05) > 0.99


def test_control_margin_scales_with_the_claim_and_equivalence_is_tost():
    assert control_margin(0.04, 0.05) == pytest.approx(math.exp(0.2 * abs(math.log(0.04))) - 1)
    assert control_margin(0.99, 0.05) == 0.05
    drift = repeat_ratio_effect([(1000.0, 993.0 + r) for r in range(5)])
    assert equivalent(drift, control_margin(0.04, 0.05))
    moved = repeat_ratio_effect([(1000.0, 40.0 + r) for r in range(5)])
    assert not equivalent(moved, control_margin(0.04, 0.05))


def test_seeded_request_interval_is_reproducible():
    pairs = [(samples(900, 8, r, 0.3), samples(600, 8, 9 + r, 0.3)) for r in range(3)]
    a = paired_ratio_effect(pairs, resamples=500, seed=7)
    b = paired_ratio_effect(pairs, resamples=500, seed=7)
    c = paired_ratio_effect(pairs, resamples=500, seed=8)
    assert a.request_ci == b.request_ci != c.request_ci
    assert (a.ci_low, a.ci_high) == (c.ci_low, c.ci_high)  # the t interval has no randomness


@pytest.mark.parametrize("pairs", [[], [([], [1.0])], [([1.0], [0.0])]])
def test_unusable_samples_are_input_errors(pairs):
    with pytest.raises(InvalidInput):
        paired_ratio_effect(pairs, resamples=10)
