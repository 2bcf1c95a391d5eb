"""The host's start-to-start variance on recorded runs: bench-00's one-way random-effects estimate, pooling across
runs, and a cross-start claim whose interval carries 2·σ²_start (Welch–Satterthwaite df) deciding as start-pooled;
without a cited variance the claim stays repeated and a cross-start control is not judged."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.bench.analysis import read_claims
from harness.bench.benches import bench00, bench69
from harness.bench.claims import claim_effect
from harness.bench.metrics import TTFT_P50
from harness.bench.spec import Arm, Claim, History, Plan, ServerVariant, WorkloadPlan, phases_for
from harness.bench.startcontrol import (
    Estimate,
    StartVariance,
    estimates_of,
    pair_variance,
    satterthwaite,
    start_rows,
    start_variance,
)
from harness.bench.stats import p_beyond
from harness.workload import Arrival, Common
from tests.bench.test_analysis import CONTROL, UNIQUE, UNIQUE_OFF, arm_run, bench69_runs

CITATION = {"manifest": "manifests/INF-AA-START/aa.intoto.json", "sha256": "0" * 64, "run_id": "aa"}
# bench-00's reference run from before --starts (two starts), kept as recorded
COMMITTED_AA = Path(__file__).parent / "recorded/aa-two-start-comparison.json"


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


def pooled(sd: float, df: float = 10.0, metric: str = TTFT_P50.name) -> StartVariance:
    return StartVariance((("aa", CITATION, {metric: Estimate(math.log1p(sd) ** 2, df, 0.0)}),))


def reading(start: StartVariance | None, factor: float = 0.8):
    history = History(cfg=None, model=None, runs=runs(factor), start_control=start)
    return read_claims(history, cross_start_plan(), seed=0, resamples=300, repeats=5)


def test_without_a_start_variance_a_cross_start_gain_is_repeated_and_capped():
    r = reading(None)
    assert (r.decision, r.evidence_level) == ("inconclusive", "repeated"), r.summary
    assert r.effect.finding == "material gain" and "make bench-00" in r.summary


def test_the_pooled_start_variance_widens_the_interval_and_the_gain_is_adopted_as_start_pooled():
    bare = reading(None).effect
    r = reading(pooled(0.02, df=10))
    assert (r.decision, r.evidence_level) == ("adopt", "start-pooled"), r.summary
    (claim,) = r.details["claims"]
    stats = claim_effect(runs(0.8), cross_start_plan().claims[0], seed=0, resamples=300, design="cross-start").stats
    within, between = stats.log_se ** 2, 2 * math.log1p(0.02) ** 2
    df = satterthwaite([(within, 4), (between, 10)])
    assert claim["design"] == "cross-start-pooled" and claim["start_control"]["df"] == pytest.approx(df)
    assert claim["start_control"]["run_ids"] == ["aa"] and claim["start_control"]["start_df"] == 10
    assert r.effect.value == pytest.approx(bare.value)
    assert r.effect.ci_low < bare.ci_low and r.effect.ci_high > bare.ci_high  # wider on both sides
    assert "pooled from bench-00 run(s) aa (σ_start 2.0%, 10 df" in r.summary


def test_a_start_variance_as_large_as_the_gain_leaves_it_undetermined():
    r = reading(pooled(0.12), factor=0.85)  # 15 % gain, start sd 12 %: 2 starts differ by ~17 % sd
    assert (r.decision, r.evidence_level, r.effect.finding) == ("inconclusive", "start-pooled", "undetermined")


def test_a_metric_the_runs_give_no_variance_for_keeps_the_cap():
    r = reading(pooled(0.02, metric="tpot_ms.p50"))
    assert (r.decision, r.evidence_level) == ("inconclusive", "repeated"), r.summary
    assert "give no start-to-start variance of ttft_ms.p50" in r.summary
    assert r.details["claims"][0]["start_control"] is None


def cross_start_control() -> tuple[Plan, list]:
    """bench-69's arms with its control read against the cache-on twin (the cache-off arm on another start than
    its baseline, as bench-69 once ran it): the control's contrast crosses starts."""
    made = bench69.plan(bench69.Config(), None)
    arms = tuple(a for a in made.arms if a.label != UNIQUE_OFF)
    plan = replace(made, arms=arms, schedule=phases_for(arms, 5, "sequential"),
                   controls=(replace(made.controls[0], baseline=UNIQUE),))
    return plan, [r for r in bench69_runs(0.993, off_start=1.0) if r.label != UNIQUE_OFF]


def test_a_cross_start_control_is_judged_by_tost_with_the_start_variance_and_not_judged_without():
    plan, recorded = cross_start_control()

    def read_with(start):
        history = History(cfg=bench69.Config(), model=None, runs=recorded, start_control=start)
        return read_claims(history, plan, seed=0, resamples=500, repeats=5)

    with_var, without = read_with(pooled(0.01)), read_with(None)
    claim, plain = with_var.details["claims"][0], without.details["claims"][0]
    # interleaved: the start variance does not touch it
    assert claim["effect"]["ci_low"] == plain["effect"]["ci_low"] and claim["start_control"] is None
    (ctrl,), (bare,) = with_var.details["controls"], without.details["controls"]
    assert ctrl["treatment"] == CONTROL and ctrl["evidence_level"] == "start-pooled"
    assert ctrl["effect"]["ci_low"] < bare["effect"]["ci_low"]
    assert ctrl["equivalence"] == "equivalent" and bare["equivalence"] == "not judged"
    assert "make bench-00" in bare["reading"] and with_var.decision == "adopt"
    # a start variance too wide for the band: not shown equivalent, which caps the primary
    wide = read_with(pooled(0.5, df=3))
    assert wide.details["controls"][0]["equivalence"] == "not shown equivalent" and wide.decision == "inconclusive"


def test_secondary_p_beyond_the_margin_pays_for_the_start_variance():
    claim = cross_start_plan().claims[0]
    res = claim_effect(runs(0.9), claim, seed=0, resamples=200, design="cross-start")
    wide = claim_effect(runs(0.9), claim, seed=0, resamples=200, design="cross-start", start=pooled(0.03))
    assert p_beyond(wide.stats, better="lower", margin=0.05) > p_beyond(res.stats, better="lower", margin=0.05)


def test_one_way_random_effects_by_hand():
    got = start_variance([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    # means 0.5, 2.5, 4.5; MS between 2·8/2 = 8, MS within 1.5/3 = 0.5, n0 2: (8 - 0.5) / 2
    assert (got["ms_between"], got["ms_within"], got["n0"]) == (8.0, 0.5, 2.0)
    assert got["start_var_log_raw"] == 3.75 and got["start_df"] == 2 and got["starts"] == 3
    assert got["start_var_var"] == pytest.approx(2 / 4 * (8 ** 2 / 2 + 0.5 ** 2 / 3))  # 2/n0² (MS_b²/df_b + MS_w²/df_w)
    noise = start_variance([[0.0, 1.0], [1.0, 0.0]])  # starts identical in mean: a negative estimate, kept raw
    assert noise["start_var_log_raw"] == -0.25 and noise["start_var_log"] == 0.0
    assert start_variance([[0.1, 0.2]]) is None


def test_pooling_weights_by_df_sums_the_df_and_clips_at_zero():
    two = StartVariance((("a", {}, {"m": Estimate(0.001, 5.0, 1e-7)}), ("b", {}, {"m": Estimate(-0.0002, 5.0, 3e-8)})))
    pooled = two.pooled("m")
    assert (pooled.var, pooled.df) == (pytest.approx(0.0004), 10.0)
    assert pooled.var_var == pytest.approx(0.25 * 1e-7 + 0.25 * 3e-8)  # Σ (df_i / Σdf)² Var_i
    # the effective df: 2σ̂⁴ / Var(σ̂²) = 2 · 0.0004² / 3.25e-8 = 9.85 (at most the summed 10)
    assert two.of("m") == (pytest.approx(0.0004), pytest.approx(2 * 0.0004 ** 2 / 3.25e-8))
    assert StartVariance((("a", {}, {"m": Estimate(-0.001, 5.0, 1e-7)}),)).of("m") == (0.0, 5.0)
    assert two.of("other") is None and two.to_dict()["start_df"] == {"m": 10.0}


def test_the_committed_two_start_run_reads_as_one_start_pair_per_metric():
    rows = json.loads(COMMITTED_AA.read_text())["details"]["start_control"]["rows"]
    got = estimates_of(rows)
    assert set(got) == {"ttft_ms.p50", "tpot_ms.p50", "e2e_ms.p50", "output_tokens_per_s"}
    assert all(e.df == 1.0 for e in got.values())
    d = np.log(rows[1]["per_repeat_ratio"])  # TPOT: start 2 ran 5 % slower, the repeats agree within ~2.5 %
    assert got["tpot_ms.p50"].var == pytest.approx((d.mean() ** 2 - d.var(ddof=1) / d.size) / 2)
    assert got["tpot_ms.p50"].var_var == pytest.approx(d.mean() ** 4 / 2)
    assert got["tpot_ms.p50"].var > 0 and pair_variance([1.0]) is None


def test_bench00_rows_give_each_metric_its_start_variance():
    cfg = bench00.Config(starts=3, repeats=4)
    plan = bench00.plan(cfg, None)
    rng = np.random.default_rng(5)
    scale = {s: math.exp(0.05 * rng.standard_normal()) for s in bench00.labels(cfg)}
    ttft = {(s, r): [200.0 * scale[s] * (1 + 0.01 * rng.standard_normal()) for _ in range(4)]
            for s in bench00.labels(cfg) for r in range(1, 5)}
    recorded = [arm_run(s, r, dict(enumerate(v))) for (s, r), v in ttft.items()]
    results = [claim_effect(recorded, c, seed=0, resamples=200, design="cross-start") for c in plan.claims[:1]]
    (row,) = start_rows(results, recorded, bench00.labels(cfg))
    medians = [[math.log(np.median(ttft[(s, r)])) for r in range(1, 5)] for s in bench00.labels(cfg)]
    assert row["start_df"] == 2 and row["starts"] == 3 and row["start_repeats"] == 12
    assert row["start_var_log_raw"] == pytest.approx(start_variance(medians)["start_var_log_raw"])
    assert row["ratio"] == pytest.approx(results[0].effect.value) and estimates_of([row])["ttft_ms.p50"].df == 2.0
