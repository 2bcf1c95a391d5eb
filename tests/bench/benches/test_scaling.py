"""Scaling efficiency against hand-computed values, and bench-81's layouts, flags and command lines."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.backends.layouts import node_args
from harness.bench.benches.bench81.scaling import (
    core_scale,
    layout_scaling,
    paired_log_ratio,
    ratio_of_means,
    scaling_table,
)
from harness.bench.records import ArmRun
from tests.typed_results import arm_result


def run(label: str, repeat: int, tok_s: float, status: str = "length") -> ArmRun:
    result = {"performance": {"throughput": {"output_tokens_per_s": tok_s}},
              "conclusion": {"valid": True, "invalid_reasons": []}}
    from harness.client import RequestRecord

    rec = RequestRecord(index=0, status=status, input_tokens=8, output_tokens_requested=4, completion_tokens=4,
                        sent_s=0.0, first_token_s=0.1, end_s=0.4, chunk_s=(0.1, 0.2, 0.3, 0.4))
    return ArmRun(label=label, repeat=repeat, result_path=Path("x"), result=arm_result(result), records=(rec,))


def test_ratio_of_means_is_hand_computable():
    r = ratio_of_means([30.0, 30.0], [10.0, 20.0], resamples=2000, seed=1)
    assert r.value == pytest.approx(2.0)  # 30 / 15
    # resampled baseline means lie in {10, 15, 20}: ratios 3, 2, 1.5
    assert r.ci_low == pytest.approx(1.5) and r.ci_high == pytest.approx(3.0)
    half = ratio_of_means([30.0, 30.0], [10.0, 20.0], scale=0.5, resamples=2000, seed=1)
    assert (half.value, half.ci_low, half.ci_high) == pytest.approx((1.0, 0.75, 1.5))
    assert ratio_of_means([], [1.0]) is None and ratio_of_means([1.0], []) is None


def test_a_layout_twice_as_fast_on_two_devices_is_perfectly_efficient():
    runs = [run("single", r, 10.0) for r in (1, 2, 3)] + [run("pp2", r, 20.0) for r in (1, 2, 3)]
    row = layout_scaling(runs, "pp2", 2, "single", resamples=500)
    assert row.throughput_tok_s == 20.0 and row.per_device_tok_s == 10.0 and row.repeats == 3
    assert (row.speedup.value, row.speedup.ci_low, row.speedup.ci_high) == (2.0, 2.0, 2.0)
    assert (row.efficiency.value, row.efficiency.ci_low, row.efficiency.ci_high) == (1.0, 1.0, 1.0)
    assert row.latency_ms["ttft_ms.p50"] == pytest.approx(100.0) and row.valid
    base = layout_scaling(runs, "single", 1, "single")
    assert base.speedup is None and base.efficiency is None
    table = scaling_table([base, row])
    assert table[0][4] == "1 (baseline)" and table[1][5] == "1.00 [1.00, 1.00]"


def test_no_baseline_means_no_efficiency_not_a_made_up_one():
    row = layout_scaling([run("dp2", 1, 12.0)], "dp2", 2, "single")
    assert row.throughput_tok_s == 12.0 and row.speedup is None and row.efficiency is None
    assert scaling_table([row])[0][4:6] == ["-", "-"]


def test_node_args_are_vllm_multi_node_flags():
    assert node_args(2, 1, "10.0.0.1", 29500) == ("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                                 "--master-port", "29500")
    from harness.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--node-rank must be in"):
        node_args(2, 2, "x")


def test_a_repeat_that_completed_nothing_is_counted_not_averaged_as_zero():
    runs = [run("single", 1, 10.0), run("tp2", 1, 14.0), run("tp2", 2, 0.0, status="timeout")]
    row = layout_scaling(runs, "tp2", 2, "single", resamples=200)
    assert row.throughput_tok_s == 14.0 and row.empty_repeats == 1 and row.repeats == 1 and not row.valid
    assert "(1 empty)" in scaling_table([row])[0][2]


def test_an_invalid_repeat_is_left_out_of_the_row_and_counted():
    bad = run("pp2", 3, 99.0)
    bad.result.conclusion.valid, bad.result.conclusion.invalid_reasons = False, ["client send lag"]
    runs = [run("single", r, 10.0) for r in (1, 2, 3)] + [run("pp2", r, 20.0) for r in (1, 2)] + [bad]
    row = layout_scaling(runs, "pp2", 2, "single", resamples=200)
    assert row.throughput_tok_s == 20.0 and row.repeats == 2 and row.invalid_repeats == 1 and row.valid
    assert "(1 invalid, left out)" in scaling_table([row])[0][2]


def test_rounds_are_resampled_jointly_and_starts_are_the_unit():
    # two runs per start; start means: baseline 10, 20, 30; layout 20, 40, 60 -> every round's ratio is 2
    runs = [run("single", r, v) for r, v in zip(range(1, 7), (9.0, 11.0, 19.0, 21.0, 29.0, 31.0), strict=True)]
    runs += [run("pp2", r, v) for r, v in zip(range(1, 7), (18.0, 22.0, 38.0, 42.0, 58.0, 62.0), strict=True)]
    row = layout_scaling(runs, "pp2", 2, "single", resamples=500, per_start=2)
    assert row.starts == 3 and row.repeats == 6
    # paired by round the ratio never moves (each round doubles); unpaired it would spread from 2/3 to 6
    assert (row.speedup.value, row.speedup.ci_low, row.speedup.ci_high) == pytest.approx((2.0, 2.0, 2.0))
    assert paired_log_ratio([1.0], [1.0, 2.0]) is None and paired_log_ratio([1.0], [1.0]) is None
    # Student t on the per-round log ratios: rounds 2, 2e^0.1, 2e^-0.1 -> mean log(2), sd 0.1, t(0.975, 2) 4.303
    r = paired_log_ratio([20.0, 20.0 * math.exp(0.1), 20.0 * math.exp(-0.1)], [10.0, 10.0, 10.0], scale=0.5)
    half = 4.302653 * 0.1 / 3 ** 0.5
    assert (r.value, r.ci_low, r.ci_high) == pytest.approx((1.0, math.exp(-half), math.exp(half)), rel=1e-5)
    # the throughput interval is Student t over the log start means 20, 40, 60 (on the linear scale it would reach
    # below zero: 40 +- 4.303 x 20 / sqrt(3))
    logs = np.log([20.0, 40.0, 60.0])
    half = 4.302653 * logs.std(ddof=1) / 3 ** 0.5
    assert row.throughput_tok_s == 40.0 and row.throughput_ci == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half)), rel=1e-5)
    assert row.throughput_ci[0] > 0


def test_a_layout_started_once_beside_a_replicated_baseline_gets_no_ratio():
    runs = [run("single", r, v) for r, v in ((1, 10.0), (2, 11.0), (3, 12.0))] + [run("pp2", 1, 20.0)]
    row = layout_scaling(runs, "pp2", 2, "single", resamples=200, cpu=True, host_cores=2)
    assert row.starts == 1 and row.throughput_tok_s == 20.0
    assert row.speedup is None and row.efficiency is None and row.throughput_ci is None
    # one start of each side: one round, no spread of either to resample, so no ratio (not a zero-width one)
    one = layout_scaling([run("single", 1, 10.0), run("pp2", 1, 20.0)], "pp2", 2, "single", resamples=200)
    assert one.speedup is None and one.efficiency is None


def test_every_core_of_the_stack_is_counted_or_the_layout_is_not_measurable():
    assert core_scale(2, cpu=False, host_cores=2) == (2.0, "2 GPU(s)")
    scale, text = core_scale(2, cpu=True, host_cores=4)
    assert scale == pytest.approx(1.5) and "3 cores (2 engine + 1 stack) over the baseline's 2" == text
    none, why = core_scale(2, cpu=True, host_cores=2)
    assert none is None and why.startswith("not measurable on 2 cores")
    runs = [run("single", r, 10.0) for r in (1, 2, 3)] + [run("pp2", r, 20.0) for r in (1, 2, 3)]
    row = layout_scaling(runs, "pp2", 2, "single", resamples=200, cpu=True, host_cores=2)
    assert row.speedup.value == 2.0 and row.efficiency is None and row.cores.startswith("not measurable")
    assert scaling_table([row])[0][5] == "n/m"
    four = layout_scaling(runs, "pp2", 2, "single", resamples=200, cpu=True, host_cores=4)
    assert four.efficiency.value == pytest.approx(2.0 / 1.5)


def test_layouts_left_out_for_one_reason_are_named_together():
    from harness.bench.benches.bench81.parallel import by_reason
    why = {"pp2": "not measurable on 2 cores", "dp2": "invalid", "tp2": "not measurable on 2 cores"}
    assert by_reason(why) == ["pp2, tp2 (not measurable on 2 cores)", "dp2 (invalid)"]
