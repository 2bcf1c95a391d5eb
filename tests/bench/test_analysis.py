"""bench-69's plan read by the framework on recorded runs: the control as an equivalence test, validity, margins."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.bench.analysis import next_step_key, read_claims
from harness.bench.benches import bench69
from harness.bench.records import ArmRun
from harness.bench.spec import History
from harness.client.records import RequestRecord
from tests.typed_results import arm_result

UNIQUE, SHARED, CONTROL, UNIQUE_OFF = bench69.UNIQUE, bench69.SHARED, bench69.CONTROL, bench69.UNIQUE_OFF


def records(ttft_ms: dict[int, float]) -> tuple[RequestRecord, ...]:
    out, t = [], 0.0
    for i, ttft in ttft_ms.items():
        first = t + ttft / 1e3
        out.append(RequestRecord(index=i, status="length", scheduled_s=t, sent_s=t, first_token_s=first,
                                 end_s=first + 0.3, chunk_s=(first,), completion_tokens=16, output_tokens_requested=16))
        t = first + 0.3
    return tuple(out)


def arm_run(label: str, repeat: int, ttft_ms: dict[int, float], valid: bool = True) -> ArmRun:
    result = {"conclusion": {"failure": None, "valid": valid,
                             "invalid_reasons": [] if valid else ["client send lag P99 40 ms over 60 sends > 2 ms"]},
              "performance": {"throughput": {"duration_s": 3.0}}, "details": {"server_metrics": {}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"{label}/r{repeat}.json"), result=arm_result(result),
                  records=records(ttft_ms))


def bench69_runs(control_factor: float, *, repeats: int = 5, invalid: tuple[str, int] | None = None,
                 seed: int = 0, off_start: float = 1.1) -> list[ArmRun]:
    """A recorded bench-69 at its defaults (G = 2, P = 4): A cold, B hits on all but each group's first request;
    on the cache-off start (``off_start`` times as slow) A' cold and C = A' x ``control_factor``."""
    rng = np.random.default_rng(seed)
    runs = []
    for r in range(1, repeats + 1):
        cold = {i: 1000.0 * (1 + 0.01 * rng.standard_normal()) for i in range(8)}
        hits = {i: cold[i] if i < 2 else 40.0 * (1 + 0.01 * rng.standard_normal()) for i in range(8)}
        cold_off = {i: off_start * 1000.0 * (1 + 0.003 * rng.standard_normal()) for i in range(8)}
        ctrl = {i: control_factor * off_start * 1000.0 * (1 + 0.003 * rng.standard_normal()) for i in range(8)}
        for label, ttft in ((UNIQUE, cold), (SHARED, hits), (UNIQUE_OFF, cold_off), (CONTROL, ctrl)):
            runs.append(arm_run(label, r, ttft, valid=(label, r) != invalid))
    return runs


def read(runs: list[ArmRun], repeats: int = 5):
    cfg = bench69.Config(repeats=repeats)
    plan = bench69.plan(cfg, None)
    return read_claims(History(cfg=cfg, model=None, runs=runs), plan, seed=0, resamples=500, repeats=repeats)


def test_a_control_within_its_margin_on_its_own_start_is_shown_equivalent_and_the_96_percent_gain_adopted():
    # the cache-off start runs 10 % slower than the cache-on one: the control's twins share that start, so the
    # start-to-start shift enters neither contrast
    reading = read(bench69_runs(0.993))
    assert (reading.decision, reading.evidence_level) == ("adopt", "paired"), reading.summary
    assert 0.03 < reading.effect.value < 0.05 and reading.effect.margin == 0.05 and reading.effect.unit == "repeat"
    (control,) = reading.details["controls"]
    assert (control["baseline"], control["treatment"]) == (UNIQUE_OFF, CONTROL)
    assert control["equivalence"] == "equivalent" and not control["shows_effect"]  # TOST on one start
    assert 0.985 < control["effect"]["value"] < 1.0 and control["effect"]["ci_high"] < 1.0  # it did move a little
    assert control["design"] == "interleaved" and control["evidence_level"] == "paired"
    assert "vetoed_by" not in reading.details and "cache-off equivalent" in reading.summary
    (claim,) = reading.details["claims"]
    assert claim["role"] == "primary" and claim["n_repeats"] == 5 and claim["n_requests"] == 8
    # requests resampled jointly and within the hit/miss cells: the request-level upper limit stays near the estimate
    assert claim["request_design"] == "joint, stratified"
    assert claim["request_level_ci"][1] < 1.5 * claim["effect"]["value"]
    assert any("margin 5.0%" in line for line in reading.lines)


def test_a_control_that_moved_as_much_as_the_treatment_makes_it_inconclusive():
    reading = read(bench69_runs(0.04))
    assert reading.decision == "inconclusive", reading.summary
    (control,) = reading.details["controls"]
    assert control["equivalence"] == "moved" and reading.details["vetoed_by"] == "cache-off"
    assert next_step_key(reading, bench69.SPEC.steps) == "vetoed"


def test_a_control_too_wide_to_show_equivalence_caps_the_claim_and_asks_for_a_narrower_interval():
    # the control 2.5x its twin in three repeats of five: its interval spans its band (x1.9 for a x0.04 gain)
    runs = bench69_runs(1.0)
    for i, run in enumerate(runs):
        if run.label == CONTROL and run.repeat % 2:
            runs[i] = arm_run(CONTROL, run.repeat, {r.index: 2.5 * (r.first_token_s - r.sent_s) * 1e3
                                                     for r in run.records})
    reading = read(runs)
    (control,) = reading.details["controls"]
    assert control["equivalence"] == "not shown equivalent" and reading.decision == "inconclusive"
    assert reading.details["vetoed_by"] == "cache-off"
    assert next_step_key(reading, bench69.SPEC.steps) == "inconclusive"  # not "the twins differ": narrow it
    assert "could explain a material share" in reading.summary


def test_three_repeats_are_single_evidence_and_at_most_inconclusive():
    reading = read(bench69_runs(0.993, repeats=3), repeats=3)
    assert (reading.decision, reading.evidence_level) == ("inconclusive", "single")
    assert "only 3 repeat" in reading.summary


def test_an_invalid_run_is_left_out_of_the_effect_and_listed():
    reading = read(bench69_runs(0.993, invalid=(SHARED, 2)))
    (claim,) = reading.details["claims"]
    assert claim["n_repeats"] == 4 and reading.evidence_level == "single"
    assert claim["validity"]["excluded"] == [f"{SHARED} repeat 2: client send lag P99 40 ms over 60 sends > 2 ms"]
    primary = next(h for h in reading.headline if h.get("role") == "primary")
    assert primary["n_repeats"] == 4 and primary["excluded"] and "left out" in primary["validity"]
    arm = next(h for h in reading.headline if h.get("arm") == SHARED)
    assert arm["n_repeats"] == 4 and arm["n_requests"] == 32 and arm["duration_s"] == 12.0


def test_a_host_whose_every_pair_is_invalid_says_client_bound_instead_of_a_number():
    runs = [r if r.label != SHARED else arm_run(SHARED, r.repeat, {i: 40.0 for i in range(8)}, valid=False)
            for r in bench69_runs(0.993)]
    reading = read(runs)
    assert reading.decision == "blocked" and reading.effect is None and reading.failure.kind == "client_bottleneck"
    assert reading.summary.startswith("client-bound here") and len(reading.invalid_reasons) == 6


def test_the_bench69_defaults_can_decide(tmp_path, monkeypatch):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    cfg = bench69.Config()
    assert cfg.repeats == 5 and cfg.size == "reference" and bench69.prefix_length(cfg)[0] == 512
    plan = bench69.plan(cfg, None)
    from harness.bench.claims import primary_index

    assert primary_index(plan) == 0 and plan.claims[0].strata is not None  # the first claim is the primary one


def test_the_design_follows_how_the_arms_met_servers():
    from harness.bench.claims import design_of
    from harness.bench.metrics import TTFT_P50
    from harness.bench.spec import Arm, Claim, Plan, ServerVariant, WorkloadPlan, phases_for
    from harness.workload import Arrival, Common

    arms = (Arm("a", "w", "s1"), Arm("b", "w", "s2"), Arm("c", "w", "s1"))
    claim_ab, claim_ac = Claim(TTFT_P50, "a", "b"), Claim(TTFT_P50, "a", "c")
    work = (WorkloadPlan("w", "random", Common(Arrival("closed", concurrency=1), requests=2)),)
    servers = (ServerVariant("s1"), ServerVariant("s2"))

    def design(order: str, claim: Claim) -> str:
        plan = Plan(workloads=work, servers=servers, arms=arms, schedule=phases_for(arms, 5, order))
        return design_of(plan, claim)
    assert design("sequential", claim_ab) == "cross-start" and design("sequential", claim_ac) == "interleaved"
    assert design("alternate", claim_ab) == "alternating" and design("alternate", claim_ac) == "interleaved"
    assert design("concurrent", claim_ab) == "cross-start"  # two variants side by side are two starts
