"""Validity per request: the client keeps its loop's stalls with their times, and a stall excludes only the requests
whose life it overlapped, from the figures it could move."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.client import ClientConfig, read_records
from harness.client.records import RequestRecord
from harness.client.runner import MAX_STALLS, Share, _LagMonitor, run_share
from harness.serving.stalls import HOLD_SLACK_S, MAX_EXCLUDED_SHARE, Stall, stall_validity
from harness.serving.validity import ClientHealth, ValidityLimits, schedule_reasons, stall_record
from harness.workload import Arrival, Common, make_workload


def records(n: int, *, ttft_s: float = 0.1, decode_s: float = 0.3, worker: int = 0) -> list[RequestRecord]:
    """``n`` requests one after another from t = 0: ready = sent, first token after ``ttft_s``, end ``decode_s``
    later."""
    out, t = [], 0.0
    for i in range(n):
        first = t + ttft_s
        out.append(RequestRecord(index=i, status="length", scheduled_s=t, sent_s=t, first_token_s=first,
                                 end_s=first + decode_s, chunk_s=(first, first + decode_s), completion_tokens=2,
                                 output_tokens_requested=2, worker=worker))
        t = first + decode_s
    return out


def test_the_lag_monitor_keeps_each_excursion_on_the_run_clock_and_bounds_them():
    monitor = _LagMonitor(t0=100.0)
    monitor.note(due=100.50, woke=100.502)  # 2 ms late: ordinary jitter, not kept
    monitor.note(due=101.00, woke=101.227)  # a 227 ms stall
    assert monitor.stalls == [(pytest.approx(1.0), pytest.approx(1.227))]
    for k in range(MAX_STALLS + 5):
        monitor.note(due=200.0 + k, woke=200.05 + k)
    assert len(monitor.stalls) == MAX_STALLS and monitor.dropped == 6  # bounded; the rest counted


def test_a_real_client_run_records_a_stall_of_its_loop_where_it_happened(tokenizer_dir, tmp_path):
    w = make_workload("random", Common(arrival=Arrival("closed", concurrency=2), requests=6, input_tokens=20,
                                       output_tokens=6), {}, tokenizer_dir)
    path = tmp_path / "r.jsonl"

    async def stalled(share: Share):
        asyncio.get_running_loop().call_later(0.15, time.sleep, 0.12)  # the loop blocked 120 ms, 150 ms in
        return await run_share(share)

    with FakeOpenAIServer(FakeConfig(ttft_s=0.03, gap_s=0.01)) as srv:
        share = Share(worker=0, requests=tuple(w.requests), client=ClientConfig(srv.url, "fake"),
                      records_path=str(path), closed_concurrency=2)
        stats = asyncio.run(stalled(share))
    long = [(a, b) for a, b in stats.stalls if b - a > 0.1]
    assert len(long) == 1 and stats.stalls_dropped == 0
    start, end = long[0]
    assert 0.0 < start < 0.3 and 0.11 < end - start < 0.3  # when it was, on the records' clock
    recs = read_records(path)
    judged = stall_validity(recs, [Stall(0, start, end)], stall_ms=20.0, late_ms=None)
    held = {e["index"] for span in judged["excluded"].values() for e in span}
    # only the ones in flight, or sent when the loop woke (their send held)
    assert held and held <= {r.index for r in recs if r.sent_s <= end + HOLD_SLACK_S and r.end_s > start}
    assert len(held) < len(recs)  # the requests before and after it are kept


def test_a_stall_after_the_first_token_cannot_move_ttft_and_one_in_mid_stream_moves_nothing_it_reads():
    recs = records(8)  # request 3 lives 1.2-1.6 s, its first token at 1.3 s, its end at 1.6 s
    mid = stall_validity(recs, [Stall(0, 1.40, 1.45)], stall_ms=20.0, late_ms=None)
    assert all(v == [] for v in mid["excluded"].values())  # nothing was stamped while the loop was held
    judged = stall_validity(recs, [Stall(0, 1.57, 1.60)], stall_ms=20.0, late_ms=None)  # it held the end
    assert judged["excluded"]["ttft"] == []
    assert [e["index"] for e in judged["excluded"]["decode"]] == [3] == [e["index"] for e in judged["excluded"]["e2e"]]
    assert judged["excluded"]["e2e"][0]["why"] == ("client stall 1.570-1.600 s (30 ms) held its end at 1.600 s: up to "
                                                   "30 ms of 400 ms")
    assert judged["valid_for"] == {"ttft": True, "decode": True, "chunks": True, "e2e": True, "run": True}
    assert not judged["reasons"]


def test_a_stall_excludes_only_where_it_is_material_to_that_part_of_the_life():
    # 25 ms: past the loop-lag floor, a quarter of a 100 ms TTFT, 0.25 % of a 10 s decode and E2E
    recs = records(4, ttft_s=0.1, decode_s=10.0)
    judged = stall_validity(recs, [Stall(0, 0.075, 0.1), Stall(0, 10.075, 10.1)], stall_ms=20.0, late_ms=None)
    assert [e["index"] for e in judged["excluded"]["ttft"]] == [0]
    assert judged["excluded"]["e2e"] == [] and judged["excluded"]["chunks"] == []
    assert judged["excluded"]["ttft"][0]["why"] == ("client stall 0.075-0.100 s (25 ms) held its first token at "
                                                    "0.100 s: up to 25 ms of 100 ms")


def test_only_the_stalled_process_and_stalls_past_the_limit_exclude():
    recs = records(8, worker=1)
    judged = stall_validity(recs, [Stall(0, 0.05, 0.30), Stall(1, 0.45, 0.46)], stall_ms=20.0, late_ms=None)
    assert all(not v for v in judged["excluded"].values())  # another process's stall; a 10 ms one under the limit
    assert judged["stalls_judged"] == 1


def test_a_late_send_excludes_its_own_ttft_and_e2e_but_not_its_decode():
    recs = records(8)
    late = RequestRecord(**{**recs[5].__dict__, "sent_s": recs[5].sent_s + 0.03})
    judged = stall_validity([*recs[:5], late, *recs[6:]], [], stall_ms=20.0, late_ms=5.0)
    assert [e["index"] for e in judged["excluded"]["ttft"]] == [5] and judged["excluded"]["decode"] == []
    assert judged["excluded"]["ttft"][0]["why"] == "sent 30.0 ms late (> 5.0 ms)"


def test_past_the_excluded_share_the_run_is_invalid_for_that_figure_only():
    recs = records(8)
    stalls = [Stall(0, 0.4 * i + 0.07, 0.4 * i + 0.1) for i in range(3)]  # holding the first tokens of 0, 1, 2
    assert stall_validity(recs, stalls[:2], stall_ms=20.0, late_ms=None)["valid_for"]["ttft"]  # 2 of 8: a quarter
    assert stall_validity(recs[:3], stalls[:1], stall_ms=20.0, late_ms=None)["valid_for"]["ttft"]  # one of 3
    judged = stall_validity(recs, stalls, stall_ms=20.0, late_ms=None)
    assert 3 / 8 > MAX_EXCLUDED_SHARE
    assert judged["valid_for"]["ttft"] is False and judged["valid_for"]["e2e"] is True  # the ends were on time
    assert judged["reasons"][0].startswith("client stalls (or late sends) moved the time to first token of 3 of 8 "
                                           "requests (38% > 25%)")


def test_with_stalls_kept_a_loop_lag_p99_no_longer_voids_the_whole_run():
    recs = records(8, ttft_s=1.0)
    lagged = dict(loop_lag_p99_ms=77.5, loop_lag_max_ms=227.0, workers=1, lag_samples=600)
    old = schedule_reasons(recs, ClientHealth(**lagged), ValidityLimits(), timed=False)
    assert old and old[0].startswith("client event-loop lag P99 77.5 ms")
    # the same run with its one stall kept: it held request 2's first token (at 3.6 s) 227 ms, 1 of 8 requests
    health = ClientHealth(**lagged, stalls=(Stall(0, 3.373, 3.6),))
    reasons = schedule_reasons(recs, health, ValidityLimits(), timed=False)
    assert reasons == ["client stalls: event-loop lag P99 77.5 ms > 50.0 ms over 600 wake-ups with 1 client "
                       "process(es): its rates over the run are moved"]  # its TTFT, TPOT and E2E keep 7 of 8
    judged = stall_record(recs, health, ValidityLimits(), timed=False)
    assert judged["valid_for"] == {"ttft": True, "decode": True, "chunks": True, "e2e": True, "run": False}
    assert [e["index"] for e in judged["excluded"]["ttft"]] == [2] == [e["index"] for e in judged["excluded"]["decode"]]
    assert judged["excluded"]["e2e"] == []  # its end was stamped on time: E2E from ready did not move


def test_the_serving_result_names_the_excluded_requests_and_validates(tmp_path: Path):
    from harness.serving.result import excluded_work

    judged = stall_validity(records(8), [Stall(0, 1.27, 1.30)], stall_ms=20.0, late_ms=None)
    work = excluded_work(judged)
    assert work.count == 1 and work.requests == ["request 3 (ttft, decode): client stall 1.270-1.300 s (30 ms) held "
                                                 "its first token at 1.300 s: up to 30 ms of 100 ms"]
    assert excluded_work(stall_validity(records(8), [], stall_ms=20.0, late_ms=None)) is None


def test_a_stall_that_held_the_sends_moves_ttft_and_e2e_and_voids_the_run_for_them():
    # bench-70's static batch on an idle host: the loop held 107 ms from 5 ms in, the first batch of 8 went out
    # when it woke: each request's TTFT and E2E (counted from ready) carry the 107 ms, its decode does not
    batch = [RequestRecord(index=i, status="length", scheduled_s=0.0, slot_s=0.0, sent_s=0.112, first_token_s=0.9,
                           end_s=1.9, chunk_s=(0.9, 1.9), completion_tokens=2, output_tokens_requested=2)
             for i in range(8)]
    later = records(8)
    later = [RequestRecord(index=8 + r.index, status="length", scheduled_s=2.0 + r.scheduled_s,
                           sent_s=2.0 + r.sent_s, first_token_s=2.0 + r.first_token_s, end_s=2.0 + r.end_s,
                           chunk_s=tuple(2.0 + t for t in r.chunk_s), completion_tokens=2, output_tokens_requested=2)
             for r in later]
    judged = stall_validity([*batch, *later], [Stall(0, 0.005, 0.112)], stall_ms=40.0, late_ms=None)
    assert [e["index"] for e in judged["excluded"]["ttft"]] == list(range(8))
    assert [e["index"] for e in judged["excluded"]["e2e"]] == list(range(8))
    assert judged["excluded"]["decode"] == [] and "held its send at 0.112 s" in \
        judged["excluded"]["ttft"][0]["why"]
    assert judged["valid_for"] == {"ttft": False, "decode": True, "chunks": True, "e2e": False, "run": True}
    # the same stall before a send it did not hold (sent on time, 200 ms later) moves nothing
    on_time = [RequestRecord(index=i, status="length", scheduled_s=0.3, slot_s=0.3, sent_s=0.3, first_token_s=0.9,
                             end_s=1.9, chunk_s=(0.9, 1.9), completion_tokens=2, output_tokens_requested=2)
               for i in range(8)]
    assert stall_validity(on_time, [Stall(0, 0.005, 0.112)], stall_ms=40.0, late_ms=None)["excluded"]["ttft"] == []
