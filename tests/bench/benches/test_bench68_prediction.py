"""bench-68's prediction held to the served figures: β fitted on self-draft, inside the interval or not, means
against means, divergent rows and the fit's own arm left out."""

from __future__ import annotations

import pytest

from harness.bench.benches.bench68.acceptance import Acceptance, Agreement, fit_verify_cost, predict
from harness.bench.benches.bench68.table import Row, row_lines
from harness.bench.lib.prediction import Judged, summarise, summary_line

# 100 decode passes, every one drafting 3 tokens and accepting all: 400 decode tokens, L = 4
SELF = Acceptance(drafts=100, draft_tokens=300, accepted_tokens=300, accepted_per_position=(100, 100, 100),
                  generated_tokens=410, requests=10)


def test_the_verification_cost_is_solved_from_the_self_draft_speedup():
    # with c = 1 and beta = 0 a pass costs 3 + 1 = 4 steps for 4 tokens: S = 1.0; served 0.8 -> a pass costs 5
    assert fit_verify_cost(SELF, 1.0) == pytest.approx(0.0)
    beta = fit_verify_cost(SELF, 0.8)
    assert beta == pytest.approx((400 / 0.8 / 100 - 4) / 3)  # (5 - 4) / 3
    back = predict(SELF, 3, 1.0, "self", verify_cost=beta, passes=200)
    assert back.speedup == pytest.approx(0.8) and back.verify_cost == pytest.approx(beta)
    assert fit_verify_cost(SELF, 2.0) == 0.0  # faster than free verification: clamped, never negative
    ngram = predict(SELF, 3, 0.0, "ngram", verify_cost=beta, passes=200)
    assert ngram.speedup == pytest.approx(400 / (100 * (3 * beta + 1)))  # c = 0, but verification is not free


def judged(name, predicted, served, low, high, excluded=""):
    return Judged(name, predicted, served, low, high, excluded)


def test_predictions_are_judged_against_the_interval_and_summarised_over_what_counts():
    rows = [judged("a", 1.0, 1.1, 0.9, 1.3), judged("b", 2.0, 1.5, 1.4, 1.6),
            judged("c", 1.0, 3.0, 2.0, 4.0, excluded="outputs differ from the baseline's")]
    assert rows[0].inside and not rows[1].inside and rows[1].error == pytest.approx(2.0 / 1.5 - 1)
    s = summarise(rows)
    assert s["n"] == 2 and s["inside"] == 1 and s["with_interval"] == 2
    errors = (1.0 / 1.1 - 1, 2.0 / 1.5 - 1)
    assert s["mean_signed_error"] == pytest.approx(sum(errors) / 2, abs=1e-6)
    assert s["mape"] == pytest.approx(sum(map(abs, errors)) / 2, abs=1e-6)
    assert s["excluded"] == {"c": "outputs differ from the baseline's"}
    assert "1/2 inside" in summary_line("predictions", s) and "left out: c" in summary_line("predictions", s)


def row(workload, arm, rate, identical=3):
    acc = Acceptance(10, 40, 40 * rate, (), 100, 2)
    return Row(workload=workload, arm=arm, refused=None, e2e=None, tpot=None, tpot_ms=(None, None),
               e2e_ms=(None, None), acceptance=acc, prediction=None, agreement=Agreement(3, identical, None),
               baseline_agreement=Agreement(3, 3, None))


def test_a_row_whose_outputs_differ_or_that_fitted_beta_is_judged_but_left_out():
    from dataclasses import replace

    from harness.bench.analysis import ClaimResult
    from harness.bench.metrics import TPOT_P50
    from harness.bench.spec import Claim
    from harness.contract import Effect

    eff = Effect(metric="tpot_ms.mean", estimator="ratio", value=0.5, ci_low=0.4, ci_high=0.625, confidence=0.95,
                 no_effect=1.0, better="lower", method="m", n_pairs=3, arm_a="b", arm_b="v")
    mean = ClaimResult(Claim(TPOT_P50, "b", "v"), eff, "adopt", "paired", "r", (0.5,) * 3)
    base = replace(row("copy", "ngram-k4", 0.8), tpot_mean=mean,
                   prediction=predict(SELF, 3, 0.0, "ngram", passes=200))
    j = base.judged()
    assert (j.measured, j.low, j.high) == pytest.approx((2.0, 1.6, 2.5)) and j.excluded == ""
    assert j.inside is (1.6 <= j.predicted <= 2.5)
    assert replace(base, agreement=Agreement(3, 2, None)).judged().excluded == "outputs differ from the baseline's"
    assert replace(base, calibration=True).judged().excluded == "verification cost fitted on it"
    # a counted row outside its interval names where its cost ratio came from (stated, not measured)
    assert not j.inside  # every pass drafts 3 and accepts them at c = 0: 4x predicted against 2x served
    line = next(x for x in row_lines([base]) if x.startswith("  copy/ngram-k4: predicted"))
    assert "outside the served interval; why it may miss: c ngram" in line and "error +100%" in line


def test_the_fit_has_an_interval_and_a_miss_inside_its_reach_is_blamed_on_it_not_on_c():
    from harness.bench.benches.bench68.acceptance import fit_verify_cost_interval

    # the self-draft arm served 0.8x [0.7, 0.9]: b 1/3, dearer at its low end, cheaper at its high end
    low, high = fit_verify_cost_interval(SELF, 0.7, 0.9)
    assert (low, high) == pytest.approx((fit_verify_cost(SELF, 0.9), fit_verify_cost(SELF, 0.7)))
    assert low < fit_verify_cost(SELF, 0.8) < high
    # a draft arm accepting nothing: each pass drafts 3 at c = 0.47 and yields 1 token
    reject = Acceptance(drafts=100, draft_tokens=300, accepted_tokens=0, accepted_per_position=(0, 0, 0),
                        generated_tokens=110, requests=10)
    p = predict(reject, 3, 0.47, "stated: weights", verify_cost=fit_verify_cost(SELF, 0.8),
                verify_cost_interval=(low, high), passes=200)
    s_low, s_high = p.speedup_interval
    assert s_low == pytest.approx(1 / (3 * (0.47 + high) + 1)) and s_high == pytest.approx(1 / (3 * (0.47 + low) + 1))
    assert s_low < p.speedup < s_high
    # served just above the point prediction but within b's reach: the fit's uncertainty is named, c too
    reach = p.miss_reason(s_high - 0.01, s_high + 0.05)
    assert "within the fit's uncertainty" in reach and "c stated: weights" in reach
    # served far above everything b's interval allows: not the fit, c is the suspect
    far = p.miss_reason(s_high * 1.5, s_high * 1.8)
    assert "not the fit's uncertainty; c stated: weights" in far
    assert p.to_dict()["verify_cost_interval"] == pytest.approx([low, high], abs=1e-6)
    # without an interval (no self-draft arm) only c is named, as before
    assert predict(reject, 3, 0.47, "stated", passes=200).miss_reason(1.0, 2.0) == "c stated"
