"""Calibration: recover a known step-cost model, predict a held-out workload, save/load, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.errors import InvalidInput
from harness.mech.calibrate.config import CalibrateConfig
from harness.mech.calibrate.fitting import (
    Observation,
    equations,
    fit_to_measurements,
    nnls_relative,
)
from harness.mech.calibrate.mechanism import run
from harness.mech.calibrate.plan import (
    compare,
    predict,
    profiling_plan,
    read_measured,
    synthetic_measurements,
)
from harness.mech.engine.costmodel import FEATURES, StepCostModel, load_cost_model, save_cost_model
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SyntheticSpec, synthetic
from tests.mech_workloads import write_workload_file

TRUTH = StepCostModel(base_ms=5.0, prefill_ms_per_token=0.3, prefill_ms_per_kilopair=0.08, decode_ms_per_seq=2.0,
                      decode_ms_per_kilotoken=1.2)
ENGINE = EngineConfig(max_num_batched_tokens=4096, max_num_seqs=32)


def test_noise_free_fit_recovers_the_model_exactly() -> None:
    plan = profiling_plan()
    model, overhead, stats = fit_to_measurements(plan, synthetic_measurements(plan, TRUTH, 4.0, ENGINE, 0.0, 0),
                                                 ENGINE)
    for name in FEATURES:
        assert getattr(model, name) == pytest.approx(getattr(TRUTH, name), rel=1e-6)
    assert overhead == pytest.approx(4.0, rel=1e-6)
    assert stats["rms_relative_residual"] < 1e-9 and stats["dropped_outliers"] == 0


def test_noisy_fit_predicts_held_out_within_ten_percent() -> None:
    plan = profiling_plan()
    model, overhead, _ = fit_to_measurements(plan, synthetic_measurements(plan, TRUTH, 4.0, ENGINE, 0.03, 1), ENGINE)
    assert model.prefill_ms_per_token == pytest.approx(TRUTH.prefill_ms_per_token, rel=0.1)
    assert model.decode_ms_per_seq == pytest.approx(TRUTH.decode_ms_per_seq, rel=0.1)
    heldout = synthetic(SyntheticSpec(requests=60, rate_rps=0.5, input_mean=400, output_mean=40, seed=9))
    measured = synthetic_measurements(heldout, TRUTH, 4.0, ENGINE, noise=0.03, seed=2)
    result = compare(predict(heldout, model, overhead, ENGINE), measured)
    for key in ("ttft_ms_p50", "tpot_ms_p50"):
        assert abs(result[key]["relative_error"]) < 0.10


def test_negative_coefficients_are_dropped() -> None:
    x = np.array([[1, 1.0], [1, 2.0], [1, 3.0]])
    y = np.array([3.0, 2.0, 1.0])  # a decreasing line: its slope would be negative
    coef = nnls_relative(x, y)
    assert coef[1] == 0 and coef[0] > 0


def test_equations_reproduce_simulated_times() -> None:
    """Under the true model's schedule, the linear equations give the simulated TTFT and TPOT exactly."""
    plan = profiling_plan(repeats=1)
    measured = synthetic_measurements(plan, TRUTH, 0.0, ENGINE, noise=0.0, seed=0)
    x, y = equations(plan, measured, TRUTH, ENGINE)
    coef = np.array([*(getattr(TRUTH, f) for f in FEATURES), 0.0])
    assert np.allclose(x @ coef, y, rtol=1e-9)


def test_outliers_are_dropped_and_counted() -> None:
    plan = profiling_plan()
    measured = synthetic_measurements(plan, TRUTH, 4.0, ENGINE, noise=0.01, seed=4)
    for i in (3, 20, 40):  # three requests stalled by something else on the machine
        m = measured[i]
        measured[i] = Observation(i, m.ttft_ms * 8, m.tpot_ms, m.output_tokens)
    model, _, stats = fit_to_measurements(plan, measured, ENGINE)
    assert stats["dropped_outliers"] >= 3
    assert model.prefill_ms_per_token == pytest.approx(TRUTH.prefill_ms_per_token, rel=0.05)


def test_nonpositive_targets_leave_the_residuals_finite() -> None:
    """A request whose tokens all arrived in one chunk (TPOT 0: the server under load flushed them
    together) gives a zero target; it is counted, and the residual figures stay finite."""
    plan = profiling_plan(repeats=1)
    measured = synthetic_measurements(plan, TRUTH, 0.0, ENGINE, noise=0.0, seed=0)
    bunched = next(i for i, m in measured.items() if m.tpot_ms is not None and m.output_tokens > 1)
    m = measured[bunched]
    measured[bunched] = Observation(bunched, m.ttft_ms, 0.0, m.output_tokens, m.sent_s)
    _, _, stats = fit_to_measurements(plan, measured, ENGINE)
    assert stats["nonpositive_targets"] == 1
    assert np.isfinite(stats["rms_relative_residual"]) and np.isfinite(stats["median_abs_relative_residual"])


def test_cost_model_roundtrip_and_bad_files(tmp_path) -> None:
    path = save_cost_model(tmp_path / "m.json", TRUTH, {"source": "test"})
    assert load_cost_model(path) == TRUTH
    from harness.contract.schemas import validate_file

    assert validate_file(path) == []  # audits of calibrate runs validate it by its marker
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(InvalidInput, match="not a step-cost model"):
        load_cost_model(tmp_path / "bad.json")
    (tmp_path / "neg.json").write_text(json.dumps({"schema": "infkit/step-cost/v1",
                                                   "coefficients": {"base_ms": -1}}))
    with pytest.raises(InvalidInput, match="base_ms"):
        load_cost_model(tmp_path / "neg.json")


def test_recorded_calibration_from_files(tmp_path) -> None:
    plan = profiling_plan()
    prof = synthetic_measurements(plan, TRUTH, 4.0, ENGINE, noise=0.02, seed=3)
    heldout = synthetic(SyntheticSpec(requests=40, rate_rps=0.5, input_mean=300, output_mean=30, seed=4))
    meas = synthetic_measurements(heldout, TRUTH, 4.0, ENGINE, noise=0.02, seed=5)

    def write(name: str, rows: dict) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"index": m.index, "ttft_ms": m.ttft_ms,
                                            "e2e_ms": m.ttft_ms + (m.tpot_ms or 0) * (m.output_tokens - 1),
                                            "output_tokens": m.output_tokens}) + "\n" for m in rows.values()))
        return str(path)

    wl_path = tmp_path / "heldout.jsonl"
    write_workload_file(wl_path, [{"index": r.index, "offset_s": r.arrival_s, "input_tokens": r.input_tokens,
                                   "output_tokens": r.output_tokens} for r in heldout.requests],
                        kind="random", arrival={"process": "poisson", "rate_rps": 0.5})
    cfg = CalibrateConfig(profile_records=write("profile.jsonl", prof), heldout_workload=str(wl_path),
                          heldout_records=write("heldout_measured.jsonl", meas))
    out = run(cfg)
    assert out.kind == "mechanism" and out.correctness.quality["passed"] is True
    assert set(read_measured(cfg.heldout_records)) == {r.index for r in heldout.requests}
    assert json.loads(out.extra_files["step_cost.json"])["schema"] == "infkit/step-cost/v1"


def test_self_check_run() -> None:
    out = run(CalibrateConfig())
    assert out.correctness.quality["passed"] is True
    assert set(out.details["recovery"]) == set(FEATURES)


def test_invalid_calibration_inputs(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="together"):
        CalibrateConfig(profile_records="p.jsonl")
    with pytest.raises(InvalidInput, match="repeats"):
        CalibrateConfig(repeats=0)
    with pytest.raises(InvalidInput, match="does not answer"):
        run(CalibrateConfig(endpoint="http://127.0.0.1:9", record_dir=str(tmp_path)))
    assert not any(tmp_path.iterdir())
    with pytest.raises(InvalidInput, match="one source"):
        CalibrateConfig(endpoint="http://127.0.0.1:9", serve=True)
    with pytest.raises(InvalidInput, match="base URL"):
        CalibrateConfig(endpoint="127.0.0.1:9")
    with pytest.raises(InvalidInput, match="usable measurements"):
        equations(profiling_plan(), {}, TRUTH, ENGINE)


def test_a_fit_whose_rounds_cycle_keeps_the_round_that_reproduces_the_measurements() -> None:
    # a live calibration arm (bench-70 on 2 cores, bf16, base server) whose rounds alternate between two solutions
    measured = read_measured(Path(__file__).parent / "mech_data" / "live-calibration-cycle.jsonl")
    engine = EngineConfig(max_num_seqs=16, max_num_batched_tokens=2048, block_size=128, num_blocks=364)
    plan = profiling_plan(1, 3.0)
    model, _, stats = fit_to_measurements(plan, measured, engine, iterations=8)
    assert not stats["settled"] and stats["kept_round"] == 1 and stats["iterations"] == 8
    assert stats["median_abs_relative_residual"] < 0.1 and model.decode_ms_per_kilotoken > 0
    # the other solution of the cycle: solved on the kept model's schedule, it reproduces its own schedule far worse
    # (and prices decode at the step's base alone); the last of an even number of rounds would have been this one
    other, _, other_stats = fit_to_measurements(plan, measured, engine, start=model, iterations=1)
    assert other_stats["median_abs_relative_residual"] > 0.3 and other.decode_ms_per_kilotoken == 0
