"""bench-70's analysis: the simulator's prediction of a served arm (hand-computed cases) and the reading's parts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.bench.benches.bench70.predict import (
    CostModel,
    engine_from,
    error,
    fit_from_profile,
    latencies,
    occupancy,
    predict,
    simulate,
)
from harness.bench.benches.bench70.reading import (
    predicted_value,
    prediction_table,
    static_signature,
    under_use,
)
from harness.bench.metrics import RUNNING_MEAN
from harness.bench.records import ArmRun
from harness.bench.spec import History
from harness.client.records import RequestRecord as Record
from harness.mech.calibrate.plan import profiling_plan, synthetic_measurements
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.types import EngineConfig, SimRequestRecord
from harness.mech.engine.workload import SimRequest, SimWorkload
from harness.serving.measure import GAUGES_FILE
from tests.typed_results import arm_result

STEP_10MS = StepCostModel(base_ms=10.0, prefill_ms_per_token=0.0, decode_ms_per_seq=0.0, decode_ms_per_kilotoken=0.0)
ENGINE = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, block_size=16, num_blocks=1024)


def closed(outputs: list[int], concurrency: int = 2) -> SimWorkload:
    reqs = tuple(SimRequest(i, None, 10, n) for i, n in enumerate(outputs))
    return SimWorkload(reqs, "sha256:" + "0" * 64, "random", {"process": "closed"}, concurrency=concurrency)


def test_static_batches_wait_for_the_slowest_and_continuous_refills_at_once():
    # Every step costs 10 ms. Batch 1 = requests 0 (2 tokens) and 1 (4 tokens): one prefill step makes both
    # first tokens (t=10 ms), request 0 ends after one more step (20 ms), request 1 after three (40 ms).
    records, scheduled = simulate(closed([2, 4, 3, 3]), ENGINE, STEP_10MS, "barrier")
    by = {r.index: r for r in records}
    assert [by[i].finish_s for i in (0, 1)] == pytest.approx([0.02, 0.04])
    # The next batch arrives together when the last of batch 1 ended (40 ms), prefills (50 ms), decodes 2 more.
    assert by[2].arrival_s == by[3].arrival_s == pytest.approx(0.04)
    assert by[2].finish_s == by[3].finish_s == pytest.approx(0.07)
    # Request 2's slot freed when request 0 ended: it waited 20 ms in the client; request 3's did not wait.
    assert scheduled[2] == pytest.approx(0.02) and scheduled[3] == pytest.approx(0.04)
    # Continuous batching: request 2 arrives when request 0 ends (20 ms) and nobody waits in the client.
    c_records, c_scheduled = simulate(closed([2, 4, 3, 3]), ENGINE, STEP_10MS, "closed")
    c_by = {r.index: r for r in c_records}
    assert c_by[2].arrival_s == pytest.approx(0.02) and c_scheduled[2] == c_by[2].arrival_s
    assert c_by[2].finish_s == pytest.approx(0.05)  # prefilled beside request 1's decode, done 20 ms earlier


def test_latencies_add_the_per_request_overhead_to_ttft_and_e2e_only():
    done = [SimRequestRecord(0, 1.0, 1.0, 1.1, 1.5, 10, 5, 0, 0, "length")]
    out = latencies(done, {0: 0.8}, overhead_ms=3.0)
    assert out["ttft_ms"]["p50"] == pytest.approx(103.0) and out["e2e_ms"]["p50"] == pytest.approx(503.0)
    assert out["tpot_ms"]["p50"] == pytest.approx(100.0)  # (1.5 - 1.1) / 4 tokens
    assert out["queue_wait_client_ms"]["p50"] == pytest.approx(200.0)
    assert out["e2e_from_scheduled_ms"]["p50"] == pytest.approx(703.0)


def test_occupancy_is_time_weighted_over_the_simulated_run():
    # A: arrives 0, admitted 0, ends 2. B: arrives 1, admitted 2, ends 3.
    recs = [SimRequestRecord(0, 0.0, 0.0, 0.5, 2.0, 1, 1, 0, 0, "length"),
            SimRequestRecord(1, 1.0, 2.0, 2.5, 3.0, 1, 1, 0, 0, "length")]
    occ = occupancy(recs)
    assert occ["running_mean"] == pytest.approx(1.0) and occ["waiting_mean"] == pytest.approx(1 / 3)
    assert occ["running_peak"] == 1 and occ["waiting_peak"] == 1 and occ["duration_s"] == pytest.approx(3.0)


def test_engine_settings_come_from_the_servers_effective_config_else_the_request():
    eff = {"scheduler_config.max_num_seqs": 4, "scheduler_config.max_num_batched_tokens": 64,
           "scheduler_config.policy": "priority", "cache_config.block_size": 128, "cache_config.num_gpu_blocks": 364}
    cfg = engine_from(eff, {"max_num_seqs": 99})
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.policy, cfg.block_size, cfg.num_blocks) == \
        (4, 64, "priority", 128, 364)
    fallback = engine_from(None, {"max_num_seqs": 6, "max_num_batched_tokens": 96})
    assert (fallback.max_num_seqs, fallback.max_num_batched_tokens, fallback.policy) == (6, 96, "fcfs")


def test_error_is_predicted_over_measured_minus_one():
    assert error(12.0, 10.0) == pytest.approx(0.2) and error(5.0, 10.0) == pytest.approx(-0.5)
    assert error(None, 1.0) is None and error(1.0, 0.0) is None


def test_the_fit_from_a_calibration_arm_recovers_a_known_cost_model(tmp_path):
    truth = StepCostModel(base_ms=8.0, prefill_ms_per_token=0.4, prefill_ms_per_kilopair=0.05, decode_ms_per_seq=1.5,
                          decode_ms_per_kilotoken=0.8)
    plan = profiling_plan(1, 3.0)
    measured = synthetic_measurements(plan, truth, 3.0, ENGINE, noise=0.0, seed=0)
    rows = [{"index": i, "ttft_ms": o.ttft_ms, "tpot_ms": o.tpot_ms, "output_tokens": o.output_tokens,
             "sent_s": plan.requests[i].arrival_s} for i, o in measured.items()]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fitted = fit_from_profile(path, 3.0, ENGINE, {"kind": "test"})
    assert fitted.model.base_ms == pytest.approx(8.0, rel=0.05)
    assert fitted.model.prefill_ms_per_token == pytest.approx(0.4, rel=0.05)
    assert fitted.overhead_ms == pytest.approx(3.0, abs=0.5) and fitted.source["profile_requests"] == len(rows)


def test_predict_reads_the_arms_workload_file_and_splits_priority_classes(tmp_path):
    from harness.workload import Arrival, Common, make_workload, write_workload
    from tests.tiny_tokenizer import train_tokenizer

    tok = train_tokenizer(tmp_path / "tok")
    common = Common(Arrival("gamma", rate_rps=50.0, burstiness=0.25), requests=12, input_tokens=20, output_tokens=6,
                    high_priority_fraction=0.25)
    path = write_workload(tmp_path / "w.jsonl", make_workload("random", common, {}, tok))
    cost = CostModel(STEP_10MS, 2.0, {"kind": "test"})
    small = EngineConfig(max_num_seqs=1, max_num_batched_tokens=64, policy="priority", block_size=16, num_blocks=256)
    out = predict(path, small, cost, "open", {"high": 0, "normal": 1})
    # one sequence at a time, 10 ms a step: every request takes 6 steps once admitted
    assert out["tpot_ms"]["p50"] == pytest.approx(10.0) and out["occupancy"]["running_peak"] == 1
    high, normal = out["classes"]["high"]["ttft_ms"]["p50"], out["classes"]["normal"]["ttft_ms"]["p50"]
    assert high < normal  # under the priority policy the tagged requests jump the queue
    assert out["engine"]["policy"] == "priority" and out["occupancy_series"][0][0] == 0.0
    fcfs = predict(path, EngineConfig(max_num_seqs=1, max_num_batched_tokens=64, block_size=16, num_blocks=256),
                   cost, "open", {"high": 0, "normal": 1})
    assert fcfs["classes"]["high"]["ttft_ms"]["p50"] > high


def _run(tmp_path: Path, label: str, running_mean: float, rows: list[int], records: list[Record]) -> ArmRun:
    folder = tmp_path / label
    folder.mkdir()
    (folder / GAUGES_FILE).write_text("".join(json.dumps({"t_s": i * 0.25, "running": v}) + "\n"
                                              for i, v in enumerate(rows)))
    result = {"details": {"server_metrics": {"occupancy": {"running_mean": running_mean}}},
              "conclusion": {"failure": None, "valid": True}}
    return ArmRun(label=label, repeat=1, result_path=folder / "result.json", result=arm_result(result),
                  records=tuple(records))


def _rec(i: int, scheduled: float, sent: float) -> Record:
    return Record(index=i, status="length", scheduled_s=scheduled, sent_s=sent, first_token_s=sent + 0.1,
                  end_s=sent + 1.0, completion_tokens=4)


def test_the_static_signature_needs_idle_slots_and_client_waits(tmp_path):
    static = _run(tmp_path, "static", 2.5, [4, 3, 1, 4, 2], [_rec(0, 0.0, 0.0), _rec(1, 1.0, 1.9), _rec(2, 1.2, 1.9)])
    cont = _run(tmp_path, "continuous", 3.9, [4, 4, 4, 3, 4], [_rec(0, 0.0, 0.0), _rec(1, 1.0, 1.0), _rec(2, 1.2, 1.2)])
    history = History(cfg=None, model=None, runs=[static, cont])
    sig = static_signature(history, "static", "continuous", 4)
    assert sig["seen"] and "signature seen" in sig["text"]
    assert sig["figures"]["client_queue_wait_ms_p50"] == {"static": pytest.approx(700.0), "continuous": 0.0}
    assert sig["figures"]["samples_below_concurrency"] == {"static": pytest.approx(0.6),
                                                           "continuous": pytest.approx(0.2)}
    assert under_use([cont], 4) == pytest.approx(0.2)
    flipped = History(cfg=None, model=None, runs=[_run(tmp_path, "s2", 3.9, [4], static.records), cont])
    assert not static_signature(flipped, "s2", "continuous", 4)["seen"]


def test_the_prediction_table_states_predicted_measured_and_error():
    predicted = {
        "ttft_ms": {"p50": 110.0, "p99": None},
        "tpot_ms": {"p50": 20.0, "p99": 30.0},
        "occupancy": {"running_mean": 3.0},
    }
    assert predicted_value(predicted, "ttft_ms.p50") == 110.0 and predicted_value(predicted, RUNNING_MEAN.name) == 3.0
    entry = {
        "mode": "open",
        "predicted": {
            "ttft_ms.p50": 110.0,
            "ttft_ms.p99": None,
            "tpot_ms.p50": 20.0,
            "tpot_ms.p99": 30.0,
            "running.mean": 3.0,
        },
        "measured": {
            "ttft_ms.p50": 100.0,
            "ttft_ms.p99": 400.0,
            "tpot_ms.p50": 25.0,
            "tpot_ms.p99": 30.0,
            "running.mean": 2.0,
        },
    }
    entry["error"] = {k: error(entry["predicted"][k], entry["measured"][k]) for k in entry["predicted"]}
    table = prediction_table({"base": entry})
    assert "110 / 100 (+10%)" in table and "- / 400" in table and "20.0 / 25.0 (-20%)" in table
    assert "3.00 / 2.00 (+50%)" in table


def test_check_applied_names_requested_effective_and_the_engines_reason():
    from harness.serving.session import NotApplied, check_applied

    backend = SimpleNamespace(
        name="vllm-cpu",
        effective_path="/server_info",
        override_reasons={"scheduler_config.async_scheduling": "forced off on CPU"},
    )
    variant = {"scheduler_config.async_scheduling": True}

    def server(effective):  # a server the kit started: its effective settings come from GET effective_path
        return SimpleNamespace(backend=backend, effective_source=None, effective=effective)

    check_applied(variant, server({"scheduler_config.async_scheduling": True}))
    with pytest.raises(
        NotApplied,
        match=r"requested scheduler_config.async_scheduling=True, the engine runs "
        r"scheduler_config.async_scheduling=False .*: forced off on CPU",
    ):
        check_applied(variant, server({"scheduler_config.async_scheduling": False}))
    with pytest.raises(NotApplied, match="cannot be checked"):
        check_applied(variant, server(None))


def test_a_paired_interval_stays_finite_when_a_resample_draws_only_zeros():
    from harness.bench.stats import paired_ratio_effect

    # mostly-zero baseline times (a sub-resolution gap): some resamples have a zero median
    eff = paired_ratio_effect([([0.0, 0.0, 1.0], [1.0, 1.0, 1.0])] * 3, resamples=500, seed=1, statistic=np.max)
    assert np.isfinite(eff.ci_low) and np.isfinite(eff.ci_high) and eff.value == 1.0
    eff = paired_ratio_effect([([0.0, 0.0, 2.0], [1.0, 1.0, 1.0])] * 2, resamples=500, seed=1, statistic=np.mean)
    assert np.isfinite(eff.ci_high)
