"""What the scheduler bench needs of the workload, client and telemetry: a priority mix sent as vLLM's
``priority``, static batches driven by the client (batch barrier), and the occupancy gauges kept as a series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.bench.metrics import E2E_SCHEDULED_P50, TTFT_P50, priority_class
from harness.client import ClientConfig, build_payload, plan_shares, read_records, run_client
from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from harness.serving.measure import GAUGES_FILE, MeasureConfig, measure
from harness.telemetry import occupancy, occupancy_rows
from harness.workload import (
    HIGH_PRIORITY,
    NORMAL_PRIORITY,
    Arrival,
    Common,
    Request,
    load_workload,
    make_workload,
    write_workload,
)


def mix(tokenizer_dir: Path, fraction: float, seed: int = 0, arrival: Arrival | None = None):
    common = Common(arrival=arrival or Arrival("gamma", rate_rps=5.0, burstiness=0.25), seed=seed, requests=20,
                    input_tokens=16, output_tokens=4, high_priority_fraction=fraction)
    return make_workload("random", common, {}, tokenizer_dir)


def test_a_priority_mix_tags_exactly_its_fraction_deterministically(tokenizer_dir, tmp_path):
    w = mix(tokenizer_dir, 0.25)
    tags = [r.priority for r in w.requests]
    assert tags.count(HIGH_PRIORITY) == 5 and tags.count(NORMAL_PRIORITY) == 15
    assert mix(tokenizer_dir, 0.25).workload_id == w.workload_id  # same parameters, same file
    assert [r.priority for r in mix(tokenizer_dir, 0.25, seed=1).requests] != tags  # its own seeded draw
    assert w.header["seeds"]["priority"] == 3 and w.header["generator"]["high_priority_fraction"] == 0.25
    back = load_workload(write_workload(tmp_path / "w.jsonl", w))  # schema-valid, id re-checked
    assert [r.priority for r in back.requests] == tags


def test_without_a_mix_the_file_has_no_priority_and_its_header_is_unchanged(tokenizer_dir, tmp_path):
    w = mix(tokenizer_dir, 0.0)
    assert set(w.header["seeds"]) == {"lengths", "content", "arrival"}
    assert "high_priority_fraction" not in w.header["generator"]
    text = write_workload(tmp_path / "w.jsonl", w).read_text()
    assert '"priority"' not in text


def test_a_bad_fraction_is_an_input_error(tokenizer_dir):
    with pytest.raises(InvalidInput, match="--high-priority-fraction .*: must be in"):
        mix(tokenizer_dir, 1.5)


def test_priority_goes_into_the_request_body_only_when_the_request_has_one():
    plain = Request(index=0, input_tokens=3, output_tokens=2, prompt="a b c")
    assert "priority" not in build_payload(ClientConfig("http://x", "m"), plain)
    tagged = Request(index=0, input_tokens=3, output_tokens=2, prompt="a b c", priority=HIGH_PRIORITY)
    assert build_payload(ClientConfig("http://x", "m"), tagged)["priority"] == HIGH_PRIORITY


def test_static_batches_wait_for_the_whole_batch_and_record_the_wait(tokenizer_dir, tmp_path):
    w = mix(tokenizer_dir, 0.25, arrival=Arrival("closed", concurrency=3))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.01, jitter_s=0.03, seed=3)) as srv:
        client = ClientConfig(endpoint=srv.url, model="fake", timeout_s=10)
        shares = plan_shares(w.requests[:9], client, str(tmp_path / "r.jsonl"), workers=4, closed_concurrency=3,
                             max_concurrency=None, batch_barrier=True)
        assert len(shares) == 1 and shares[0].batch_barrier  # one process: the barrier spans the batch
        run_client(shares)
    recs = {r.index: r for r in read_records(tmp_path / "r.jsonl")}
    batches = [[recs[i] for i in range(k, k + 3)] for k in (0, 3, 6)]
    for prev, nxt in zip(batches, batches[1:], strict=False):
        last_end = max(r.end_s for r in prev)
        assert all(r.sent_s >= last_end for r in nxt)  # nobody joins before the batch is done
        for p, r in zip(prev, nxt, strict=True):
            assert r.scheduled_s == pytest.approx(p.end_s)  # its slot freed when its predecessor ended
            assert r.slot_s is not None and r.slot_s >= last_end - 1e-6 and r.send_lag_s < 0.05
    waits = [r.sent_s - r.scheduled_s for b in batches[1:] for r in b]
    assert max(waits) > 0.005  # the jittered batch mates kept some slots idle
    assert {recs[i].extra["priority"] for i in recs} == {HIGH_PRIORITY, NORMAL_PRIORITY}


def test_measure_refuses_a_batch_barrier_on_a_timed_workload_and_writes_the_gauge_series(tokenizer_dir, tmp_path):
    timed = write_workload(tmp_path / "timed.jsonl", mix(tokenizer_dir, 0.25))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.05, gap_s=0.02)) as srv:
        with pytest.raises(InvalidInput, match="static batches .* need a closed-loop workload"):
            measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=timed, out_dir=tmp_path / "x",
                                  batch_barrier=True))
        out = measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=timed, out_dir=tmp_path / "ok",
                                    gauge_interval_s=0.05))
    rows = [json.loads(line) for line in (tmp_path / "ok" / GAUGES_FILE).read_text().splitlines()]
    assert len(rows) >= 5 and all(0 <= r["t_s"] for r in rows) and max(r["running"] for r in rows) >= 1
    occ = out.result["details"]["server_metrics"]["occupancy"]
    assert occ["samples"] == len(rows) and 0 < occ["running_mean"] <= occ["running_peak"]
    assert out.result["details"]["client"]["batch_barrier"] is False


def test_occupancy_is_time_weighted_over_the_run_window():
    t0 = 100.0
    series = [(t0 - 0.5, {"vllm:num_requests_running": 9.0}),  # before the run: dropped
              (t0 + 0.0, {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}),
              (t0 + 1.0, {"vllm:num_requests_running": 2.0, "vllm:num_requests_waiting": 1.0}),
              (t0 + 2.0, {"vllm:num_requests_running": 4.0, "vllm:num_requests_waiting": 0.0}),
              (t0 + 4.0, {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}),
              (t0 + 9.0, {"vllm:num_requests_running": 7.0})]  # after the last request ended: dropped
    rows = occupancy_rows(series, t0, end_s=5.0)
    assert [r["t_s"] for r in rows] == [0.0, 1.0, 2.0, 4.0]
    occ = occupancy(rows)
    # each sample holds until the next; the last one a median interval (1 s): weights 1, 1, 2, 1
    assert occ["running_mean"] == pytest.approx((0 + 2 + 4 * 2 + 0) / 5)
    assert occ["waiting_mean"] == pytest.approx(1 / 5)
    assert occ["running_peak"] == 4.0 and occ["waiting_peak"] == 1.0 and occ["samples"] == 4
    assert occupancy(rows[:1]) is None


def test_class_metrics_select_by_the_priority_each_request_was_sent_with():
    def rec(i: int, prio: int, ttft: float) -> RequestRecord:
        return RequestRecord(index=i, status="length", scheduled_s=0.0, sent_s=0.5, first_token_s=0.5 + ttft,
                             end_s=2.0, chunk_s=(0.5 + ttft, 2.0), completion_tokens=2, extra={"priority": prio})
    records = [rec(0, HIGH_PRIORITY, 0.1), rec(1, NORMAL_PRIORITY, 0.3), rec(2, NORMAL_PRIORITY, 0.5)]
    high = priority_class(TTFT_P50, "high", HIGH_PRIORITY)
    # a claim's TTFT counts from the scheduled send: each request here was sent 500 ms late
    assert high.name == "ttft_ms.p50[high]" and high.samples(records) == pytest.approx([600.0])
    assert priority_class(TTFT_P50, "normal", NORMAL_PRIORITY).samples(records) == pytest.approx([800.0, 1000.0])
    assert E2E_SCHEDULED_P50.samples(records) == pytest.approx([2000.0] * 3)  # end - scheduled, client wait included
