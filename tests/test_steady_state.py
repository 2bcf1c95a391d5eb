"""Throughput over the steady-state window (``harness.serving.steady``): synthetic runs whose ramp, drain and
service rate are known."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.client.records import RequestRecord
from harness.contract.schemas import validate_document
from harness.serving.metrics import performance
from harness.serving.steady import MIN_COMPLETIONS
from harness.serving.summary import steady_line

EXAMPLE = Path(__file__).parent / "examples" / "valid" / "serving-single.json"


def request(i: int, sent: float, service: float, tokens: int, *, streamed: bool = True,
            per_chunk: bool = True) -> RequestRecord:
    chunks = tuple(sent + service * (j + 1) / tokens for j in range(tokens))
    return RequestRecord(index=i, status="stop", scheduled_s=sent, sent_s=sent,
                         first_token_s=chunks[0] if streamed else None, end_s=chunks[-1],
                         chunk_s=chunks if streamed else (), chunk_tokens=(1,) * tokens if streamed and per_chunk
                         else (), completion_tokens=tokens, prompt_tokens=5, input_tokens=5)


def open_loop(n: int = 100, rate: float = 10.0, service: float = 1.0, tokens: int = 10, **kw: bool
              ) -> list[RequestRecord]:
    """Arrivals every 1/rate s, each served in ``service`` s (no queueing): steady rate = ``rate``."""
    return [request(i, i / rate, service, tokens, **kw) for i in range(n)]


def closed_loop(slots: int = 4, per_slot: int = 21, service: float = 1.0, tokens: int = 8) -> list[RequestRecord]:
    """``slots`` requests in flight; slot j's first request takes service * (1 + j / slots), the rest ``service``,
    each next one sent 1 µs after the previous ended: completions every service / slots s, i.e. slots / service
    per second once the first wave has turned over."""
    out: list[RequestRecord] = []
    for j in range(slots):
        t = 0.0
        for m in range(per_slot):
            took = service * (1 + j / slots) if m == 0 else service
            out.append(request(len(out), t, took, tokens))
            t += took + 1e-6
    return out


def test_open_loop_steady_rate_is_the_arrival_rate_and_the_whole_run_is_not() -> None:
    tp = performance(open_loop())["throughput"]
    st = tp["steady_state"]
    assert st["request_rate_rps"] == pytest.approx(10.0, abs=1e-3)
    assert st["output_tokens_per_s"] == pytest.approx(100.0, abs=1e-2)
    assert st["total_tokens_per_s"] == pytest.approx(150.0, abs=1e-2)  # 5 prompt tokens each
    assert tp["request_rate_rps"] < 9.3  # 100 requests over 9.9 s of sends + 1 s of drain
    # window: the 10 requests sent by the first completion (t=1.0) have ended at t=1.9 ... 2.0
    assert st["start_s"] == pytest.approx(2.0) and st["end_s"] == pytest.approx(9.9)
    assert st["drain_fraction"] == pytest.approx(1.0 / 10.9, abs=1e-4)
    assert st["ramp_fraction"] == pytest.approx(2.0 / 10.9, abs=1e-4)
    assert st["null_reason"] is None and st["rule"].startswith("window from the k-th completion")


def test_closed_loop_steady_rate_is_the_service_rate_and_the_whole_run_is_not() -> None:
    tp = performance(closed_loop())["throughput"]
    st = tp["steady_state"]
    assert st["request_rate_rps"] == pytest.approx(4.0, rel=1e-4)
    assert st["output_tokens_per_s"] == pytest.approx(32.0, rel=1e-2)
    assert st["start_s"] == pytest.approx(1.75, abs=1e-4)  # the 4th completion: the first wave turned over
    assert abs(tp["request_rate_rps"] - 4.0) > 0.1  # ramp and drain pull the whole-run figure off
    assert 0 < st["drain_fraction"] < 0.1


@pytest.mark.parametrize("kw", [{"streamed": False}, {"per_chunk": False}])
def test_tokens_without_chunk_counts_or_chunk_times(kw: dict[str, bool]) -> None:
    """Without per-chunk counts the request's tokens spread over its chunks; non-streamed, its span is clipped."""
    st = performance(open_loop(**kw))["throughput"]["steady_state"]
    assert st["request_rate_rps"] == pytest.approx(10.0, abs=1e-3)
    assert st["output_tokens_per_s"] == pytest.approx(100.0, rel=2e-2)
    assert st["total_tokens_per_s"] == pytest.approx(150.0, rel=2e-2)


def test_too_short_a_window_is_null_with_the_reason() -> None:
    st = performance(open_loop(n=MIN_COMPLETIONS + 5, rate=10.0, service=0.5))["throughput"]["steady_state"]
    assert st["request_rate_rps"] is None and st["output_tokens_per_s"] is None
    assert "too short" in st["null_reason"] and st["drain_fraction"] is not None
    assert "too short" in steady_line(st)
    wave = performance(closed_loop(slots=4, per_slot=1))["throughput"]["steady_state"]
    assert wave["request_rate_rps"] is None and "first wave" in wave["null_reason"]


def test_a_server_falling_behind_has_token_rates_but_no_request_rate() -> None:
    """Latency grows with every request: few finish inside the window, but tokens flow through all of it."""
    recs = [request(i, i / 10, 0.5 + 2 * i, 10) for i in range(200)]
    st = performance(recs)["throughput"]["steady_state"]
    assert st["request_rate_rps"] is None and "completions lag the sends" in st["null_reason"]
    assert st["start_s"] == pytest.approx(11.0) and st["end_s"] == pytest.approx(19.9)
    inside = sum(1 for r in recs for t in r.chunk_s if 11.0 < t <= 19.9)
    assert st["output_tokens_per_s"] == pytest.approx(inside / 8.9, abs=1e-3)


def test_result_schema_holds_the_steady_state_object() -> None:
    doc = json.loads(EXAMPLE.read_text())
    behind = [request(i, i / 10, 0.5 + 2 * i, 10) for i in range(200)]
    for recs in (open_loop(), behind):
        doc["performance"]["throughput"]["steady_state"] = performance(recs)["throughput"]["steady_state"]
        assert validate_document(doc) == []
    short = copy.deepcopy(doc)
    short["performance"]["throughput"]["steady_state"] = performance(open_loop(n=12))["throughput"]["steady_state"]
    assert validate_document(short) == []
    for key, value in (("null_reason", None), ("drain_fraction", 1.5), ("extra", 1)):
        bad = copy.deepcopy(short)
        bad["performance"]["throughput"]["steady_state"][key] = value
        assert validate_document(bad), key
