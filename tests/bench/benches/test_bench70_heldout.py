"""bench-70's held-out prediction design on hand-made runs: the calibration's repeat never judges the
prediction, and the bias and MAPE intervals match what resampling arms and repeats gives on known cases."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from harness.bench.benches.bench70 import CALIBRATION, Config, groups, with_calibration
from harness.bench.benches.bench70.heldout import ArmErrors, Split, across_arms, interval, replicates, rule, split_runs
from harness.bench.metrics import RUNNING_MEAN, TTFT_P50
from harness.bench.records import ArmRun
from harness.bench.spec import Plan, phases_for
from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from tests.typed_results import arm_result

ARMS = ("continuous", "static", "base", "seqs-low")


def run(label: str, repeat: int, ttft_ms: float | list[float] = 100.0, running: float | None = None) -> ArmRun:
    values = ttft_ms if isinstance(ttft_ms, list) else [ttft_ms] * 8
    records = tuple(RequestRecord(index=i, status="length", scheduled_s=0.0, sent_s=0.0, first_token_s=v / 1000,
                                  end_s=v / 1000 + 0.5, completion_tokens=11) for i, v in enumerate(values))
    details = {"server_metrics": {"occupancy": {"running_mean": running}}} if running is not None else {}
    result = {"conclusion": {"valid": True}, "details": details}
    return ArmRun(label, repeat, Path(f"arms/{label}/r{repeat}/result.json"), arm_result(result), records)


def schedule_plan(order: str, repeats: int = 3) -> Plan:
    cfg = Config()
    arms = {a.label: a for g in groups(cfg).values() for a in g[0]}
    schedule = with_calibration(cfg, phases_for([arms[a] for a in ARMS], repeats, order), [], {})  # type: ignore[arg-type]
    return cast(Plan, SimpleNamespace(schedule=schedule))


def test_a_calibration_in_the_repeat_it_judges_is_refused():
    with pytest.raises(InvalidInput, match="calibration run calibration r1 is in the repeat of the runs that test"):
        Split(("calibration", 1), (("base", 2), ("base", 1)))
    with pytest.raises(InvalidInput, match="base r2"):
        Split(("base", 2), (("base", 2),))  # an arm run taken as the calibration cannot also test it
    assert Split(None, (("base", 1),)).test == (("base", 1),)  # a cited model was fitted in another run


@pytest.mark.parametrize("order, shared", [("sequential", {"continuous", "static", "base"}), ("alternate", set())])
def test_the_calibration_repeat_is_left_out_and_its_server_start_named(order, shared):
    runs = [run(CALIBRATION, 1)] + [run(a, r) for a in ARMS for r in (1, 2, 3)]
    split = split_runs(schedule_plan(order), runs, ARMS, runs[0], "the profiling plan on server base")
    assert split.calibration == (CALIBRATION, 1) and split.test_repeats == (2, 3)
    assert set(split.left_out) == {(a, 1) for a in ARMS} and not set(split.left_out) & set(split.test)
    assert {a for a, _ in split.same_start} == shared  # sequential: the first server's arms share its start
    assert [r.repeat for r in split.runs(runs, "base")] == [2, 3]
    described = split.to_dict()
    assert described["calibration"] == {"arm": CALIBRATION, "repeat": 1} and "judged on r2, r3" in described["rule"]


def test_with_one_repeat_nothing_is_judged_and_a_cited_model_is_judged_on_every_repeat():
    runs = [run(CALIBRATION, 1)] + [run(a, 1) for a in ARMS]
    alone = split_runs(schedule_plan("sequential", 1), runs, ARMS, runs[0], "here")
    assert alone.test == () and "judged on nothing (one repeat)" in rule(alone)
    cited = split_runs(schedule_plan("sequential", 1), runs[1:], ARMS, None, "cited: m.intoto.json")
    assert set(cited.test) == {(a, 1) for a in ARMS} and "every repeat judges them" in rule(cited)


def test_repeats_are_the_outer_unit_of_the_measured_interval():
    # every request of run A took 100 ms, of run B 200 ms: drawn repeats (AA, AB/BA, BB) give P50 100, 150, 200
    # with probabilities 1/4, 1/2, 1/4; resampling the 16 pooled requests would give 150 only when exactly 8 of
    # each are drawn (p = 0.20) and 100 or 200 otherwise
    runs = [run("base", 2, 100.0, running=2.0), run("base", 3, 200.0, running=4.0)]
    reps = replicates([TTFT_P50, RUNNING_MEAN], runs, resamples=4000, rng=np.random.default_rng(1))
    values, counts = np.unique(np.round(reps[TTFT_P50.name], 6), return_counts=True)
    assert list(values) == [100.0, 150.0, 200.0]
    assert counts / counts.sum() == pytest.approx([0.25, 0.5, 0.25], abs=0.03)
    assert interval(reps[TTFT_P50.name]) == (100.0, 200.0)
    assert set(np.unique(reps[RUNNING_MEAN.name])) == {2.0, 3.0, 4.0}  # the drawn repeats' median
    one = replicates([RUNNING_MEAN], runs[:1], resamples=50, rng=np.random.default_rng(1))
    assert interval(one[RUNNING_MEAN.name]) is None  # one repeat of a per-run figure: no interval


def exact_percentile_bootstrap(values: list[float], statistic: Any) -> np.ndarray:
    """Every equally likely resample of ``values`` (n^n of them), the statistic of each."""
    return np.asarray([statistic([values[i] for i in draw])
                       for draw in itertools.product(range(len(values)), repeat=len(values))])


def test_bias_and_mape_intervals_match_the_exact_bootstrap_over_arms():
    errors = [0.2, -0.1, 0.1, 0.0]  # no measurement noise: only the arms vary
    arms = [ArmErrors(f"a{i}", {"x": 100 * (1 + e)}, {"x": 100.0}, {"x": np.full(50, 100.0)})
            for i, e in enumerate(errors)]
    got = across_arms(arms, ["x"], resamples=20000, seed=3)
    assert got["n_arms"] == got["n"] == 4
    assert got["mean_signed_error"] == pytest.approx(0.05) and got["mape"] == pytest.approx(0.1)
    for key, statistic in (("mean_signed_error", np.mean), ("mape", lambda d: np.mean(np.abs(d)))):
        exact = np.quantile(exact_percentile_bootstrap(errors, statistic), [0.025, 0.975])
        assert got[f"{key}_interval"] == pytest.approx(tuple(exact), abs=0.0126)  # a 1/8 step of the exact support
    assert "arm is the outer unit" in got["method"] and got["unit"].startswith("fraction")


def test_measurement_noise_alone_sets_one_arms_interval():
    # one arm predicted 100; its measurement's replicates are 80, 100 and 125 in equal parts: errors +25 %, 0, -20 %
    arm = ArmErrors("base", {"x": 100.0}, {"x": 100.0}, {"x": np.tile([80.0, 100.0, 125.0], 1000)})
    got = across_arms([arm], ["x"], resamples=6000, seed=0)
    assert got["mean_signed_error"] == 0.0 and got["mean_signed_error_interval"] == pytest.approx((-0.2, 0.25))
    assert got["mape_interval"] == pytest.approx((0.0, 0.25))
    assert across_arms([arm], ["y"], resamples=10, seed=0)["n"] == 0  # a figure no arm predicted
