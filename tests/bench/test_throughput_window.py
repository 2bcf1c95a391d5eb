"""Bench throughput figures read the steady-state window when a run has one, say which window they cover, carry
the drain fraction, and never pair a steady-state figure with a whole-run one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.bench.metrics import GOODPUT, OUTPUT_TOKENS_PER_S, REQUEST_RATE, basis_summary, throughput_basis
from harness.bench.records import ArmRun
from tests.typed_results import arm_result


def arm_run(whole: float, steady: float | None, drain: float = 0.3) -> ArmRun:
    state: dict[str, Any] = {"rule": "r", "drain_fraction": drain, "ramp_fraction": 0.1,
                             "request_rate_rps": steady, "output_tokens_per_s": None if steady is None else 10 * steady,
                             "null_reason": None if steady is not None else "steady-state window too short"}
    result = {"conclusion": {"valid": True}, "performance": {"throughput": {
        "request_rate_rps": whole, "output_tokens_per_s": 10 * whole, "goodput_rps": whole, "steady_state": state}}}
    return ArmRun(label="a", repeat=1, result_path=Path("r.json"), result=arm_result(result), records=())


def test_run_figures_prefer_the_steady_state_and_fall_back_with_the_reason() -> None:
    steady, short = arm_run(2.0, 2.5), arm_run(2.0, None)
    assert REQUEST_RATE.run_value(steady) == 2.5 and OUTPUT_TOKENS_PER_S.run_value(steady) == 25.0
    assert REQUEST_RATE.run_value(short) == 2.0 and GOODPUT.run_value(steady) == 2.0  # goodput stays whole-run
    assert throughput_basis(steady) == {"window": "steady_state", "drain_fraction": 0.3, "ramp_fraction": 0.1,
                                        "reason": None}
    assert throughput_basis(short)["window"] == "whole_run" and "too short" in throughput_basis(short)["reason"]


def test_a_pair_is_read_over_one_window() -> None:
    both, one = (arm_run(2.0, 2.5), arm_run(3.0, 3.5)), (arm_run(2.0, 2.5), arm_run(3.0, None))
    assert REQUEST_RATE.pair_values(*both) == (2.5, 3.5)
    assert REQUEST_RATE.pair_values(*one) == (2.0, 3.0)  # not 2.5 against a whole-run 3.0


def test_the_basis_summary_counts_windows_and_gives_the_drain() -> None:
    got = basis_summary([arm_run(2.0, 2.5, 0.2), arm_run(2.0, None, 0.4), arm_run(2.0, 2.4, 0.3)])
    assert got["throughput_window"] == {"steady_state": 2, "whole_run": 1}
    assert got["drain_fraction"] == 0.3 and got["drain_fraction_range"] == [0.2, 0.4]
    assert got["whole_run_reason"] == ["steady-state window too short"]
