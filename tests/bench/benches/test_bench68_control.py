"""bench-68's negative control read on recorded rows: natural-text acceptance checked low, the control's per-token
claim, and an n-gram adopt capped when the control does not hold (and not when it does)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.bench.analysis import ClaimResult
from harness.bench.benches.bench68.acceptance import Acceptance, Agreement
from harness.bench.benches.bench68.control import cap_ngram, negative_control
from harness.bench.benches.bench68.table import Row, decide_top
from harness.bench.metrics import E2E_P50, TPOT_P50
from harness.bench.spec import Claim
from harness.client.records import RequestRecord
from harness.contract import Effect


def claim(metric, base, spec, value, decision, finding):
    eff = Effect(metric=metric.name, estimator="ratio", value=value, ci_low=value * 0.9, ci_high=value * 1.1,
                 confidence=0.95, no_effect=1.0, better="lower", method="m", n_pairs=5, arm_a=base, arm_b=spec,
                 finding=finding)
    return ClaimResult(Claim(metric, base, spec), eff, decision, "paired", "r", (value,) * 5, finding=finding)


def row(workload, arm, rate, *, e2e=None, tpot=None, control=False):
    acc = Acceptance(drafts=10, draft_tokens=40, accepted_tokens=40 * rate, accepted_per_position=(),
                     generated_tokens=100, requests=2)
    return Row(workload=workload, arm=arm, refused=None, e2e=e2e, tpot=tpot, tpot_ms=(None, None), e2e_ms=(None, None),
               acceptance=acc, prediction=None, agreement=Agreement(8, 8, None),
               baseline_agreement=Agreement(8, 8, None), control=control)


ADOPT = claim(E2E_P50, "copy/off@ngram-k4", "copy/ngram-k4", 0.6, "adopt", "material gain")
FLAT = claim(TPOT_P50, "natural/off@ngram-k4", "natural/ngram-k4", 1.02, "inconclusive", "no material effect")
GAIN = claim(TPOT_P50, "natural/off@ngram-k4", "natural/ngram-k4", 0.7, "inconclusive", "material gain")


def read(natural_rate, natural_claim=FLAT, copy_rate=0.75):
    rows = [row("copy", "ngram-k4", copy_rate, e2e=ADOPT, tpot=ADOPT),
            row("natural", "ngram-k4", natural_rate, e2e=ADOPT, tpot=natural_claim, control=True)]
    control = negative_control(rows, 0.5, 0.5)
    return control, decide_top(cap_ngram(rows, control, ["ngram-k4"]))


def test_a_low_control_holds_and_leaves_the_n_gram_adopt_alone():
    control, top = read(0.2)
    assert control["passed"] and control["arms"][0]["limit"] == pytest.approx(0.375)  # min(50 %, half of copy's 75 %)
    assert "holds" in control["text"] and top.decision == "adopt"
    rows = {r.workload: r for r in top.rows}
    assert rows["copy"].role == "primary" and rows["natural"].role == "control" and rows["natural"].holm_p is None
    # the control is read on TPOT (its E2E says adopt here, and is not what decides it)
    assert rows["natural"].deciding is FLAT and rows["natural"].decision == "inconclusive"
    assert rows["natural"].to_dict()["decided_on"] == "tpot_ms.p50"


@pytest.mark.parametrize("rate, copy_rate, why", [
    (0.95, 0.75, "acceptance 95% > 38%"),  # the looping regime ignore_eos produced
    (0.45, 0.75, "acceptance 45% > 38%"),  # under the absolute limit, but not well below copy's
    (0.3, 0.4, "acceptance 30% > 20%"),
])
def test_a_control_with_high_acceptance_caps_the_n_gram_adopt(rate, copy_rate, why):
    control, top = read(rate, copy_rate=copy_rate)
    assert not control["passed"] and why in control["arms"][0]["why"]
    assert "fails" in control["text"]
    head = next(r for r in top.rows if r.role == "primary")
    assert head.decision == "inconclusive (control failed)" and "negative control did not hold" in head.capped
    assert top.decision == "inconclusive" and "capped at inconclusive" in top.summary


def test_a_control_whose_per_token_claim_adopts_fails_too_and_a_gain_finding_is_recorded():
    control, top = read(0.1, natural_claim=replace(GAIN, decision="adopt"))
    assert not control["passed"] and "its TPOT claim adopts (x0.70)" in control["arms"][0]["why"]
    assert top.decision == "inconclusive"
    control, top = read(0.1, natural_claim=GAIN)  # low acceptance with a material gain: echoed prose, not a loop
    assert control["passed"] and control["arms"][0]["tpot_finding"] == "material gain" and top.decision == "adopt"


def test_an_unmeasured_control_caps_and_a_reject_is_not_touched():
    rows = [row("copy", "ngram-k4", 0.75, e2e=ADOPT, tpot=ADOPT)]
    control = negative_control(rows, 0.5, 0.5)
    assert not control["passed"] and "not measured" in control["text"]
    assert decide_top(cap_ngram(rows, control, ["ngram-k4"])).decision == "inconclusive"
    reject = replace(ADOPT, decision="reject")
    other = [replace(rows[0], e2e=reject)]
    assert decide_top(cap_ngram(other, control, ["ngram-k4"])).decision == "reject"
    assert cap_ngram(rows, control, ["draft-10L"]) == rows  # only the n-gram rows are capped


def test_like_for_like_lengths_and_terminations_are_recorded():
    from tests.bench.benches.test_speculative import run

    runs = [run("natural/off@ngram-k4", 1, texts=("a b", "c")), run("natural/ngram-k4", 1, texts=("a b", "c"))]
    runs = [replace(r, records=tuple(replace(rec, status=s, completion_tokens=n) for rec, s, n in
                                     zip(r.records, ("stop", "length"), (7, 48), strict=True))) for r in runs]
    rows = [row("copy", "ngram-k4", 0.75, e2e=ADOPT, tpot=ADOPT),
            row("natural", "ngram-k4", 0.2, tpot=FLAT, control=True)]
    like = negative_control(rows, 0.5, 0.5, runs)["arms"][0]["like_for_like"]
    assert like["baseline"] == like["variant"] == {"terminations": {"length": 1, "stop": 1}, "output_tokens": 55,
                                                   "requests": 2}
    assert like["greedy_agreement"]["identical"] == 8
    assert isinstance(runs[0].records[0], RequestRecord)


def test_the_co_residence_shift_is_the_baseline_beside_a_variant_against_itself_alone():
    from harness.bench.benches.bench68.coresidence import co_residence
    from tests.bench.benches.test_speculative import run

    def timed(label, repeat, end_s):  # 20 tokens from 0.1 s to end_s: TPOT = (end_s - 0.1) / 19 s
        r = run(label, repeat, texts=("a", "b", "c", "d"))
        return replace(r, records=tuple(replace(rec, end_s=end_s + 0.01 * rec.index) for rec in r.records))

    runs = [timed(label, k, end) for k in (1, 2, 3)
            for label, end in (("copy/off", 1.0), ("copy/off@ngram-k4", 1.225), ("copy/off@self-draft", 1.0))]
    shift = co_residence(runs, ["ngram-k4", "self-draft", "draft-10L"], seed=0, resamples=200)
    rows = {r["variant"]: r for r in shift["rows"]}
    assert rows["ngram-k4"]["tpot_ms.p50"]["value"] == pytest.approx((1.225 + 0.015 - 0.1) / (1.015 - 0.1), rel=0.02)
    assert rows["self-draft"]["tpot_ms.p50"]["value"] == pytest.approx(1.0)
    assert rows["draft-10L"]["tpot_ms.p50"] is None  # no baseline runs beside it
    assert shift["measured"] and "baseline beside ngram-k4: TPOT p50 x1.25" in "\n".join(shift["lines"])
    assert not co_residence(runs[1:2], ["ngram-k4"], seed=0, resamples=200)["measured"]
