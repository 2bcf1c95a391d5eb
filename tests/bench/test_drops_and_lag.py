"""Nothing vanishes silently and small runs are judged: dropped pairs named, send lag pooled over an arm's repeats,
claim latencies from the scheduled send — on synthetic records with hand-computed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.claims import claim_effect, dropped_pairs
from harness.bench.metrics import E2E_P50, REQUEST_RATE, TPOT_P50, TTFT_P50, from_ready
from harness.bench.records import ArmRun
from harness.bench.sendlag import pooled_send_lag
from harness.bench.spec import Claim
from harness.client.records import RequestRecord
from tests.bench.test_analysis import arm_run, read
from tests.typed_results import arm_result


def rec(i: int, *, scheduled: float, lag_ms: float = 0.0, ttft_ms: float = 100.0, tokens: int = 16,
        slot: float | None = None) -> RequestRecord:
    sent = (slot if slot is not None else scheduled) + lag_ms / 1e3
    first = sent + ttft_ms / 1e3
    chunks = tuple(first + 0.01 * k for k in range(tokens))
    return RequestRecord(index=i, status="length", scheduled_s=scheduled, slot_s=slot, sent_s=sent,
                         first_token_s=first, end_s=chunks[-1], chunk_s=chunks, completion_tokens=tokens,
                         output_tokens_requested=tokens)


def lag_run(label: str, repeat: int, lags_ms: list[float], gap_s: float = 1.0) -> ArmRun:
    records = tuple(rec(i, scheduled=i * gap_s, lag_ms=lag) for i, lag in enumerate(lags_ms))
    result = {"conclusion": {"failure": None, "valid": True, "invalid_reasons": []},
              "details": {"client": {"mean_arrival_gap_ms": gap_s * 1e3},
                          "validity_limits": {"min_lag_samples": 50, "lag_fraction": 0.05, "send_lag_p99_ms": 1.0}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"{label}/r{repeat}.json"), result=arm_result(result),
                  records=records)


def test_a_claims_latency_counts_from_the_scheduled_send_and_tpot_does_not_move():
    late = rec(0, scheduled=0.0, lag_ms=40.0, ttft_ms=100.0)
    values = from_ready(late)
    assert values["ttft_ms"] == pytest.approx(140.0) and values["e2e_ms"] == pytest.approx(290.0)
    assert values["tpot_ms"] == pytest.approx(10.0)  # (250 - 100) / 15, from the actual send either way
    # a request that waited for a concurrency slot counts from the slot's release (its send lag's start)
    slotted = rec(1, scheduled=0.0, slot=2.0, lag_ms=5.0, ttft_ms=100.0)
    assert from_ready(slotted)["ttft_ms"] == pytest.approx(105.0)
    assert TTFT_P50.samples([late]) == [pytest.approx(140.0)] and E2E_P50.samples([late]) == [pytest.approx(290.0)]


def test_a_late_client_cannot_flatter_an_arm():
    # B's server is 10 % faster, but B's client sent 30 ms late on every request: from the scheduled send B is
    # slower, which is what its users saw; from the actual send it would read as a 10 % gain
    runs = []
    for r in range(1, 6):
        runs.append(ArmRun("a", r, Path("a"), arm_result({}),
                           tuple(rec(i, scheduled=float(i), ttft_ms=200.0 + i) for i in range(20))))
        runs.append(ArmRun("b", r, Path("b"), arm_result({}),
                           tuple(rec(i, scheduled=float(i), lag_ms=30.0, ttft_ms=180.0 + i) for i in range(20))))
    res = claim_effect(runs, Claim(TTFT_P50, "a", "b"), seed=0, resamples=200)
    assert res is not None and res.effect.value > 1.0


def test_a_pair_without_samples_or_with_a_none_figure_is_named_not_dropped():
    runs = []
    for r in range(1, 4):
        runs.append(ArmRun("a", r, Path("a"), arm_result({"performance": {"throughput": {"request_rate_rps": 2.0}}}),
                           tuple(rec(i, scheduled=float(i)) for i in range(5))))
        tokens = 1 if r == 2 else 16  # repeat 2 of b: one token per request, so no TPOT
        rate = None if r == 3 else 2.2
        runs.append(ArmRun("b", r, Path("b"), arm_result({"performance": {"throughput": {"request_rate_rps": rate}}}),
                           tuple(rec(i, scheduled=float(i), tokens=tokens) for i in range(5))))
    tpot = Claim(TPOT_P50, "a", "b")
    assert dropped_pairs(runs, tpot) == ["repeat 2: b has no tpot_ms.p50 sample (pair left out)"]
    res = claim_effect(runs, tpot, seed=0, resamples=100)
    assert res is not None and res.effect.n_pairs == 2
    assert res.to_dict()["validity"]["dropped"] == ["repeat 2: b has no tpot_ms.p50 sample (pair left out)"]
    rate = claim_effect(runs, Claim(REQUEST_RATE, "a", "b"), seed=0, resamples=100)
    assert rate is not None and rate.dropped == ("repeat 3: request_rate_rps a 2.0, b None (pair left out)",)


def test_the_summary_lines_name_a_dropped_pair():
    from tests.bench.test_analysis import SHARED, bench69_runs

    runs = bench69_runs(0.993)
    k = next(i for i, r in enumerate(runs) if r.label == SHARED and r.repeat == 3)
    gone = runs[k]
    runs[k] = ArmRun(gone.label, 3, gone.result_path, gone.result,
                     tuple(RequestRecord(index=r.index, status="length", scheduled_s=r.scheduled_s, sent_s=r.sent_s,
                                         first_token_s=None, end_s=r.end_s) for r in gone.records))
    reading = read(runs)
    assert any(line.startswith("dropped from") and f"repeat 3: {gone.label} has no ttft_ms.p50 sample" in line
               for line in reading.lines), reading.lines
    assert reading.details["claims"][0]["n_repeats"] == 4


def test_send_lag_is_judged_over_an_arms_repeats_pooled():
    # 3 repeats x 20 sends, each under the 50 a run needs alone; repeat 2 sent 4 of its 20 late by 30 ms:
    # pooled, 4 of 60 (6.7 %) are late, so the pooled P95 (30 ms) is past 5 % of the TTFT P50 (100 ms): 5 ms
    runs = [lag_run("a", 1, [0.0] * 20), lag_run("a", 2, [30.0] * 4 + [0.0] * 16), lag_run("a", 3, [0.0] * 20)]
    judged, records = pooled_send_lag(runs)
    assert [r.valid for r in judged] == [True, False, True]
    (why,) = judged[1].result.conclusion.invalid_reasons
    assert why.startswith("client send lag P95 30.0 ms over 60 sends pooled over 3 repeats of a > 5.0 ms")
    assert "this run sent 4 of them late" in why
    (record,) = records
    assert record["judged"] and record["sends"] == 60 and record["invalid_repeats"] == [2]
    assert record["failed"][0]["check"] == "P95"
    # the same late sends spread thinner (2 of 60, 3.3 %) move neither the P95 nor, at 5 ms, the P99 past its limit
    ok, _ = pooled_send_lag([lag_run("a", 1, [0.0] * 20), lag_run("a", 2, [4.0] * 2 + [0.0] * 18),
                             lag_run("a", 3, [0.0] * 20)])
    assert all(r.valid for r in ok)
    # two runs of 20: 40 sends pooled, still too few for a P99: not judged, and said so
    few, (note,) = pooled_send_lag(runs[:2])
    assert all(r.valid for r in few) and not note["judged"] and "40 sends pooled < 50" in note["why"]
    # applied twice, the second pass changes nothing (the pooled runs are judged once, by the runner)
    again, _ = pooled_send_lag(judged)
    assert [r.valid for r in again] == [True, False, True]


def test_a_pooled_invalid_run_is_left_out_and_listed_like_any_invalid_run():
    from harness.bench.claims import excluded_runs

    runs = [arm_run("x", 1, {0: 100.0})]
    judged, _ = pooled_send_lag([*runs, lag_run("a", 1, [0.0] * 30), lag_run("a", 2, [30.0] * 4 + [0.0] * 26)])
    assert [r.label for r in judged if not r.valid] == ["a"]
    assert excluded_runs(judged, ["a"])[0].startswith("a repeat 2: client send lag P95")
