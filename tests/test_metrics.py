"""Golden tests for harness.serving.metrics: every value below is computed by hand from the records."""

from __future__ import annotations

import pytest

from harness.client.records import RequestRecord
from harness.serving.metrics import distribution, meets_slo, performance

A = RequestRecord(index=0, status="length", scheduled_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.25,
                  chunk_s=(0.1, 0.15, 0.25), completion_tokens=3, prompt_tokens=10, input_tokens=10)
B = RequestRecord(index=1, status="stop", scheduled_s=0.04, sent_s=0.05, first_token_s=0.25, end_s=0.35,
                  chunk_s=(0.25, 0.35), completion_tokens=2, prompt_tokens=20, input_tokens=20)
C = RequestRecord(index=2, status="error", scheduled_s=0.1, sent_s=0.1, end_s=0.2, error="HTTP 500")
D = RequestRecord(index=3, status="not_sent")
RECORDS = [A, B, C, D]


def test_distribution_linear_percentiles_and_population_std():
    d = distribution([100.0, 200.0])
    assert d == {"n": 2, "mean": 150.0, "std": 50.0, "min": 100.0, "p50": 150.0, "p90": 190.0, "p95": 195.0,
                 "p99": 199.0, "max": 200.0}
    assert distribution([]) is None
    # 1..10: type-7 rank (n-1)q → P90 = 9.1, P99 = 9.91
    ten = distribution([float(i) for i in range(1, 11)])
    assert (ten["p50"], ten["p90"], ten["p99"]) == (5.5, 9.1, 9.91)


def test_ttft_e2e_tpot_itl():
    p = performance(RECORDS)
    assert p["percentile_method"] == "linear"
    assert (p["ttft_ms"]["n"], p["ttft_ms"]["mean"], p["ttft_ms"]["p99"]) == (2, 150.0, 199.0)
    assert (p["e2e_ms"]["mean"], p["e2e_ms"]["p50"], p["e2e_ms"]["p90"], p["e2e_ms"]["p99"]) == (
        275.0,
        275.0,
        295.0,
        299.5,
    )
    # TPOT: A (250-100)/(3-1) = 75, B (300-200)/(2-1) = 100
    assert (p["tpot_ms"]["min"], p["tpot_ms"]["max"], p["tpot_ms"]["mean"], p["tpot_ms"]["p99"]) == (
        75.0,
        100.0,
        87.5,
        99.75,
    )
    # ITL pooled: A 50, 100; B 100
    assert p["itl_ms"]["n"] == 3
    assert p["itl_ms"]["mean"] == pytest.approx(83.3333, abs=1e-4)
    assert (p["itl_ms"]["min"], p["itl_ms"]["p50"], p["itl_ms"]["max"]) == (50.0, 100.0, 100.0)


def test_client_queue_wait_counts_every_sent_request():
    q = performance(RECORDS)["queue_wait_client_ms"]
    # A 0, B 10, C 0 (D was never sent)
    assert q["n"] == 3
    assert q["mean"] == pytest.approx(3.3333, abs=1e-4)
    assert (q["p50"], q["p90"], q["p99"]) == (0.0, 8.0, 9.8)


def test_throughput_and_goodput():
    p = performance(RECORDS, slo={"ttft_ms": 150})
    t = p["throughput"]
    # duration: first send 0.0 → last end 0.35 s
    assert t["duration_s"] == pytest.approx(0.35)
    assert t["request_rate_rps"] == pytest.approx(2 / 0.35, abs=1e-4)
    assert t["output_tokens_per_s"] == pytest.approx(5 / 0.35, abs=1e-4)
    assert t["total_tokens_per_s"] == pytest.approx(35 / 0.35, abs=1e-4)
    assert t["goodput_rps"] == pytest.approx(1 / 0.35, abs=1e-4)  # only A has TTFT <= 150 ms
    assert t["slo"] == {"ttft_ms": 150}
    both = performance(RECORDS, slo={"ttft_ms": 250, "tpot_ms": 80})["throughput"]
    assert both["goodput_rps"] == pytest.approx(1 / 0.35, abs=1e-4)  # B fails TPOT 100 > 80
    assert performance(RECORDS)["throughput"]["goodput_rps"] is None


def test_output_tokens_fall_back_to_chunks_without_usage():
    no_usage = RequestRecord(
        index=0,
        status="stop",
        scheduled_s=0.0,
        sent_s=0.0,
        first_token_s=0.1,
        end_s=0.4,
        chunk_s=(0.1, 0.2, 0.3, 0.4),
        input_tokens=5,
    )
    p = performance([no_usage])
    assert p["tpot_ms"]["mean"] == pytest.approx(100.0)  # (400 - 100) / (4 - 1)
    assert p["throughput"]["output_tokens_per_s"] == pytest.approx(4 / 0.4, abs=1e-4)


def test_single_token_outputs_have_no_tpot_and_nothing_completed_has_reasons():
    one = RequestRecord(
        index=0,
        status="length",
        scheduled_s=0.0,
        sent_s=0.0,
        first_token_s=0.1,
        end_s=0.1,
        chunk_s=(0.1,),
        completion_tokens=1,
    )
    p = performance([one])
    assert p["tpot_ms"] is None and "tpot_ms" in p["null_reasons"] and p["itl_ms"] is None
    empty = performance([C, D])
    assert empty["ttft_ms"] is None and empty["e2e_ms"] is None
    assert set(empty["null_reasons"]) == {"ttft_ms", "tpot_ms", "itl_ms", "itl_chunk_ms", "itl_token_ms", "e2e_ms",
                                          "ttft_from_scheduled_ms", "e2e_from_scheduled_ms"}


def test_slo_rules():
    assert meets_slo({"ttft_ms": 10.0, "tpot_ms": None}, {"ttft_ms": 10.0, "tpot_ms": 1.0})
    assert not meets_slo({"ttft_ms": 10.1}, {"ttft_ms": 10.0})
    with pytest.raises(ValueError, match="unknown SLO"):
        performance(RECORDS, slo={"latency": 1.0})
