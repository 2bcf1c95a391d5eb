"""A cited A/A start control on recorded runs: it widens a cross-start claim's interval and the claim stays
repeated and capped (one start pair's bound certifies nothing); wide or absent, it leaves the interval as it is.
A control on another start than its baseline is not judged, and neither clears nor vetoes the primary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.analysis import read_claims
from harness.bench.benches import bench00, bench69
from harness.bench.claims import claim_effect
from harness.bench.metrics import TTFT_P50
from harness.bench.spec import Arm, Claim, History, Plan, ServerVariant, WorkloadPlan, phases_for
from harness.bench.startcontrol import StartControl, control_of, log_bound, start_rows
from harness.bench.stats import p_beyond
from harness.workload import Arrival, Common
from tests.bench.test_analysis import CONTROL, arm_run, bench69_runs, read

CITATION = {"manifest": "manifests/INF-AA-START/aa.intoto.json", "sha256": "0" * 64, "run_id": "aa"}


def cross_start_plan() -> Plan:
    """Two variants, each started once in turn (sequential): their contrast crosses server starts."""
    arms = (Arm("old", "w", "s1"), Arm("new", "w", "s2"))
    work = (WorkloadPlan("w", "random", Common(Arrival("closed", concurrency=1), requests=8)),)
    return Plan(workloads=work, servers=(ServerVariant("s1"), ServerVariant("s2")), arms=arms,
                schedule=phases_for(arms, 5, "sequential"), claims=(Claim(TTFT_P50, "old", "new"),))


def runs(factor: float, noise: float = 0.01, repeats: int = 5, seed: int = 0, labels=("old", "new")):
    rng = np.random.default_rng(seed)
    out = []
    for r in range(1, repeats + 1):
        base = {i: 500.0 * (1 + noise * rng.standard_normal()) for i in range(8)}
        other = {i: factor * v * (1 + noise * rng.standard_normal()) for i, v in base.items()}
        out += [arm_run(labels[0], r, base), arm_run(labels[1], r, other)]
    return out


def control(bound_pct: float | None, why: str = "bound ±30.0% exceeds the limit ±10.0%") -> StartControl:
    if bound_pct is None:
        return StartControl("aa", CITATION, bounds={}, unbounded={TTFT_P50.name: why})
    return StartControl("aa", CITATION, bounds={TTFT_P50.name: math.log1p(bound_pct / 100)})


def reading(start: StartControl | None, factor: float = 0.8):
    plan = cross_start_plan()
    history = History(cfg=None, model=None, runs=runs(factor), start_control=start)
    return read_claims(history, plan, seed=0, resamples=300, repeats=5)


def test_without_a_start_control_a_cross_start_gain_is_repeated_and_capped():
    r = reading(None)
    assert (r.decision, r.evidence_level) == ("inconclusive", "repeated"), r.summary
    assert r.effect.finding == "material gain" and "different server starts" in r.summary


def test_a_tight_start_control_widens_the_gain_but_never_makes_it_paired():
    bare = reading(None).effect
    r = reading(control(2.0))
    assert (r.decision, r.evidence_level) == ("inconclusive", "repeated"), r.summary
    assert r.effect.finding == "material gain" and "so the evidence stays repeated" in r.summary
    b = math.log1p(0.02)
    assert r.effect.value == pytest.approx(bare.value)
    assert math.log(r.effect.ci_low) == pytest.approx(math.log(bare.ci_low) - b)
    assert math.log(r.effect.ci_high) == pytest.approx(math.log(bare.ci_high) + b)
    assert "cross-start, widened by the A/A start control aa (±2.0%" in r.summary
    assert "widened by ±0.0198 on the log scale" in r.effect.method
    (claim,) = r.details["claims"]
    assert claim["design"] == "cross-start" and claim["start_control"]["run_id"] == "aa"
    assert claim["start_control"]["manifest"] == CITATION["manifest"]


def test_a_bound_as_large_as_the_gain_leaves_it_repeated_and_undetermined():
    r = reading(control(12.0), factor=0.85)  # 15 % gain, ±12 % start shift: the widened interval crosses the margin
    assert (r.decision, r.evidence_level, r.effect.finding) == ("inconclusive", "repeated", "undetermined"), r.summary


def test_a_wide_start_control_bounds_nothing_and_leaves_the_cap():
    r = reading(control(None))
    assert (r.decision, r.evidence_level) == ("inconclusive", "repeated"), r.summary
    assert "does not bound ttft_ms.p50 (bound ±30.0% exceeds the limit ±10.0%)" in r.summary
    assert r.details["claims"][0]["start_control"] is None


def test_interleaved_claims_are_not_touched_by_a_start_control():
    plain = read(bench69_runs(0.993)).details["claims"][0]
    plan = bench69.plan(bench69.Config(), None)
    history = History(cfg=bench69.Config(), model=None, runs=bench69_runs(0.993), start_control=control(2.0))
    bounded = read_claims(history, plan, seed=0, resamples=500, repeats=5)
    claim = bounded.details["claims"][0]
    assert claim["effect"]["ci_low"] == plain["effect"]["ci_low"] and claim["start_control"] is None
    # the cross-start cache-off control: its interval widened, not judged (with or without the A/A), no veto
    (ctrl,) = bounded.details["controls"]
    (bare,) = read(bench69_runs(0.993)).details["controls"]
    assert ctrl["effect"]["ci_low"] < bare["effect"]["ci_low"] and ctrl["effect"]["ci_high"] > bare["effect"]["ci_high"]
    assert ctrl["evidence_level"] == "repeated" and ctrl["equivalence"] == bare["equivalence"] == "not judged"
    assert not ctrl["shows_effect"] and "one start pair cannot show equivalence" in ctrl["reading"]
    assert bounded.decision == "adopt" and ctrl["treatment"] == CONTROL and "vetoed_by" not in bounded.details


def test_secondary_p_beyond_the_margin_pays_for_the_widening():
    plan = cross_start_plan()
    res = claim_effect(runs(0.9), plan.claims[0], seed=0, resamples=200, design="cross-start")
    wide = claim_effect(runs(0.9), plan.claims[0], seed=0, resamples=200, design="cross-start", start=control(3.0))
    assert p_beyond(wide.stats, better="lower", margin=0.05) > p_beyond(res.stats, better="lower", margin=0.05)


def test_the_aa_rows_bound_each_metric_and_refuse_a_wide_or_short_one():
    plan = bench00.plan(bench00.Config(), None)
    tight = runs(1.0, noise=0.01, labels=(bench00.FIRST, bench00.SECOND))
    results = [claim_effect(tight, c, seed=0, resamples=200, design="cross-start") for c in plan.claims[:1]]
    (row,) = start_rows(results, 0.10, 5)
    assert row["bounded"] and row["bound_log"] == pytest.approx(log_bound(row["ci_low"], row["ci_high"]))
    assert row["bound_log"] < math.log1p(0.05) and row["n_repeats"] == 5
    wide = runs(1.0, noise=0.4, labels=(bench00.FIRST, bench00.SECOND), seed=3)
    (wrow,) = start_rows([claim_effect(wide, plan.claims[0], seed=0, resamples=200, design="cross-start")], 0.02, 5)
    assert not wrow["bounded"] and "exceeds the limit ±2.0%" in wrow["why_not"]
    short = runs(1.0, repeats=3, labels=(bench00.FIRST, bench00.SECOND))
    (srow,) = start_rows([claim_effect(short, plan.claims[0], seed=0, resamples=200, design="cross-start")], 0.1, 5)
    assert not srow["bounded"] and "only 3 valid pair(s) of repeats" in srow["why_not"]
    cited = control_of([row, {**wrow, "metric": "tpot_ms.p50"}], "aa", CITATION)
    assert set(cited.bounds) == {TTFT_P50.name} and "exceeds" in cited.unbounded["tpot_ms.p50"]
