"""Invalid arm runs redone in their place and named with a recommendation, replayed on recorded failures."""

from __future__ import annotations

import io
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from harness.bench.benches import bench69
from harness.bench.claims import claim_effect
from harness.bench.exclusion import usable
from harness.bench.hostload import Competitor, HostLoad
from harness.bench.invalid import Reruns, constraint_of, named, recommendations
from harness.bench.metrics import E2E_P50, OUTPUT_TOKENS_PER_S, TPOT_P50, TTFT_P50
from harness.bench.outputs import summary_text
from harness.bench.records import ArmRun
from harness.bench.spec import Claim
from harness.client.records import RequestRecord
from harness.contract import Conclusion
from harness.progress import Reporter
from harness.serving.stalls import Stall, stall_validity
from harness.serving.validity import ClientHealth, ValidityLimits, stall_record
from tests.bench.test_analysis import read, records
from tests.typed_results import arm_result

UNIQUE, SHARED, CONTROL, UNIQUE_OFF = bench69.UNIQUE, bench69.SHARED, bench69.CONTROL, bench69.UNIQUE_OFF
ARMS = (UNIQUE, SHARED, UNIQUE_OFF, CONTROL)  # a round of the bench's four arms
# bench-69 on a host with one niced CPU-bound job beside it: the recorded reason of its one invalid arm run
LOOP_LAG = ("client event-loop lag P99 77.5 ms > 20.0 ms (5% of TTFT P99 / mean arrival gap) with 1 client "
            "process(es): the client is a bottleneck")
SEND_LAG = "client send lag P95 5.3 ms over 164 sends > 4.1 ms (5% of TTFT P50 / mean arrival gap): the client ..."


def arm_run(label: str, repeat: int, ttft_ms: dict[int, float], reasons: tuple[str, ...] = (),
            attempt: int = 1) -> ArmRun:
    result = {"conclusion": {"failure": None, "valid": not reasons, "invalid_reasons": list(reasons)},
              "performance": {"throughput": {"duration_s": 3.0}}, "details": {"server_metrics": {}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"{label}/r{repeat}-a{attempt}.json"),
                  result=arm_result(result), records=records(ttft_ms))


def bench69_step(repeat: int, label: str, stalled: set[tuple[str, int, int]], attempt: int = 1) -> ArmRun:
    """One arm run of the recorded bench-69 (effect x0.134): cold 1000 ms, hits 134 ms on all but each group's
    first request, the control's twins on their own start; ``stalled`` (arm, repeat, attempt) met the competing job."""
    spread = 1 + 0.004 * ((repeat * 7 + len(label)) % 5 - 2)  # a little start-to-start noise, deterministic
    cold = {i: 1000.0 * spread for i in range(8)}
    ttft = {SHARED: {i: cold[i] if i < 2 else 134.0 * spread * (1 + 0.01 * (repeat % 3)) for i in range(8)},
            UNIQUE: cold, UNIQUE_OFF: cold, CONTROL: {i: 995.0 * spread for i in range(8)}}[label]
    reasons = (LOOP_LAG,) if (label, repeat, attempt) in stalled else ()
    return arm_run(label, repeat, ttft, reasons, attempt)


def replay(stalled: set[tuple[str, int, int]], budget: int) -> tuple[list[ArmRun], Reruns]:
    """The bench's fixed steps (5 rounds of its four arms) through the runner's re-run rule."""
    reruns, runs = Reruns(budget, Reporter(io.StringIO())), []
    for repeat in range(1, 6):
        for label in ARMS:
            first = bench69_step(repeat, label, stalled)
            runs.append(reruns.settle(first, partial(bench69_step, repeat, label, stalled)))
            if reruns.failure is not None:
                return runs, reruns
    return runs, reruns


def conclusion(reading) -> dict:
    return {"evidence_level": reading.evidence_level, "decision": reading.decision, "valid": not reading.invalid_runs,
            "summary": reading.summary, "next_step": reading.next_step or bench69.SPEC.steps.get(reading.decision)}


def test_bench69s_recorded_stall_left_out_reads_inconclusive_and_says_why_not_raise_repeats():
    # the recorded run: no re-run, the stalled shared-prefix run left out, 4 pairs of the 5 required
    runs, reruns = replay({(SHARED, 3, 1)}, budget=0)
    assert reruns.failure is not None  # with no budget the bench now stops at the stall, naming it
    runs = [bench69_step(r, label, {(SHARED, 3, 1)}) for r in range(1, 6) for label in ARMS]
    reading = named(read(runs), runs)
    assert (reading.decision, reading.evidence_level, reading.effect.n_pairs) == ("inconclusive", "single", 4)
    assert 0.12 < reading.effect.value < 0.15 and reading.effect.ci_high < 1 / 1.05  # beyond the margin already
    (entry,) = reading.invalid_runs
    assert (entry["arm"], entry["repeat"], entry["reasons"]) == (SHARED, 3, [LOOP_LAG])
    assert "raise --repeats" not in reading.next_step and "already lies beyond the margin" in reading.next_step
    assert reading.recommendations == (recommendations([LOOP_LAG])[0],)
    text = summary_text("bench-69", "", reading, arm_result({"conclusion": conclusion(reading), "kind": "comparison"}),
                        1.0)
    flat = " ".join(text.split())  # the summary is wrapped for a terminal
    assert f"invalid or undecided: - {SHARED} repeat 3 (left out of every effect and figure it would distort): " \
           f"{LOOP_LAG}" in flat
    assert "recommendations: - client schedule: the client ran late" in flat
    assert "raise --repeats" not in text


def test_bench69s_recorded_stall_is_rerun_in_place_and_the_replay_adopts():
    runs, reruns = replay({(SHARED, 3, 1)}, budget=3)
    assert reruns.failure is None and len(runs) == 20
    assert [(r["arm"], r["repeat"], r["attempt"], r["reasons"]) for r in reruns.done] == [(SHARED, 3, 2, [LOOP_LAG])]
    assert runs[9].result_path == Path(f"{SHARED}/r3-a2.json")  # the re-run took the stalled run's place
    reading = named(read(runs), runs, reruns.done)
    assert (reading.decision, reading.evidence_level, reading.effect.n_pairs) == ("adopt", "paired", 5), reading.summary
    assert 0.12 < reading.effect.value < 0.15
    (entry,) = reading.invalid_runs  # still named, with what became of it
    assert entry["consequence"] == "re-run in its place" and entry["reasons"] == [LOOP_LAG]
    assert reruns.record()["used"] == 1 and reruns.record()["runs"][0]["replaced"] == f"{SHARED}/r3-a1.json"


def test_a_stall_that_repeats_past_the_budget_stops_early_with_the_reason():
    stalled = {(SHARED, 3, 1), (SHARED, 3, 2), (UNIQUE, 4, 1)}
    runs, reruns = replay(stalled, budget=2)
    assert reruns.failure is not None and reruns.failure.kind == "client_bottleneck"
    assert reruns.failure.message == (f"{UNIQUE} repeat 4 invalid after 1 attempt(s) and the re-run budget (2, "
                                      f"--reruns) is spent: {LOOP_LAG}")
    assert (runs[-1].label, runs[-1].repeat, runs[-1].valid) == (UNIQUE, 4, False) and len(runs) == 13


def test_one_recommendation_per_failed_constraint_in_the_order_met():
    reasons = [LOOP_LAG, SEND_LAG, "2 of 40 requests did not complete (2 timeout)", LOOP_LAG,
               "achieved send rate 90.0% of the scheduled rate < 95%"]
    advice = recommendations(reasons, host="competing: stress (pid 41, 98% of a core)")
    assert [a.split(":")[0] for a in advice] == ["client schedule", "requests completed"]
    assert advice[0].endswith("(competing: stress (pid 41, 98% of a core))") and "competing" not in advice[1]
    assert constraint_of("repeat 2: client-bound here: the client and API server used 1.30 cores").name == \
        "client CPU share"
    assert constraint_of("something new").name == "other"


def stalled_step(repeat: int, label: str, attempt: int = 1) -> ArmRun:
    """bench-69's recorded stall as a client that keeps its loop's excursions records it: 227 ms in the time to the
    first token of request 4 of the shared-prefix arm's repeat 3 (its TTFT ~134 -> ~361 ms), judged per request."""
    run = bench69_step(repeat, label, set(), attempt)
    if (label, repeat) != (SHARED, 3):
        return run
    moved = {i: (r.first_token_s - r.sent_s) * 1e3 + (227.0 if i == 4 else 0.0) for i, r in enumerate(run.records)}
    recs = records(moved)
    start = recs[4].first_token_s - 0.227  # it held the first token
    health = ClientHealth(loop_lag_p99_ms=77.5, loop_lag_max_ms=227.0, workers=1, lag_samples=600,
                          stalls=(Stall(0, start, start + 0.227),))
    judged = stall_record(recs, health, ValidityLimits(), timed=False)
    conclusion = replace(run.result.conclusion, valid=not judged["reasons"], invalid_reasons=judged["reasons"])
    result = replace(run.result, conclusion=conclusion, details={"server_metrics": {}, "client": {"stalls": judged}})
    return replace(run, result=result, records=recs)


def test_bench69s_recorded_stall_judged_per_request_keeps_the_run_and_adopts():
    reruns, runs = Reruns(0, Reporter(io.StringIO()), metrics=(TTFT_P50,)), []
    for repeat in range(1, 6):
        for label in ARMS:
            runs.append(reruns.settle(stalled_step(repeat, label), partial(stalled_step, repeat, label)))
    # no budget, yet no stop and no re-run: the stall moved one request's TTFT, not the run's
    assert reruns.failure is None and reruns.done == [] and len(runs) == 20
    stalled = runs[9]
    assert (stalled.label, stalled.repeat, stalled.valid) == (SHARED, 3, False)  # invalid for its rates only
    assert stalled.result.detail("client", "stalls", "valid_for") == {"ttft": True, "decode": True, "chunks": True,
                                                                       "e2e": True, "run": False}
    reading = named(read(runs), runs)
    assert (reading.decision, reading.evidence_level, reading.effect.n_pairs) == ("adopt", "paired", 5), reading.summary
    work = reading.excluded_work
    assert work.count == 1 and work.agree and work.decision_all == work.decision_kept == "adopt"
    assert work.requests[0].startswith(f"{SHARED} repeat 3 request 4 (time to first token): client stall")
    (entry,) = reading.invalid_runs  # named, with what became of it
    assert entry["consequence"].startswith("left out of the figures of its rates over the run; kept for those of")
    (claim,) = reading.details["claims"]
    assert claim["validity"]["agree"] and claim["validity"]["excluded_requests"] == work.requests
    written = Conclusion(evidence_level="paired", decision="adopt", next_step="n", repeats=5,
                         effect=reading.effect, excluded_work=work).to_dict()
    assert written["excluded_work"]["effect_all"]["n_pairs"] == 5
    text = summary_text("bench-69", "", reading,
                        arm_result({"conclusion": {**conclusion(reading), **written}, "kind": "comparison"}), 1.0)
    flat = " ".join(text.split())
    assert flat.startswith("bench-69: ADOPT (paired evidence, VALID)")
    assert f"excluded: 1 request(s) a client stall held ({SHARED} repeat 3 request 4 (time to first " in flat
    assert "on every request ADOPT" in flat and "too: the decision stands" in flat
    assert f"- {SHARED} repeat 3 (left out of the figures of its rates over the run; kept for those of" in flat


def test_a_decision_that_rests_on_the_excluded_requests_is_capped_at_inconclusive():
    # treatment: 8 of 12 requests at 80 ms, 4 at 100 ms, against 100 ms; in every repeat a stall moved three of the
    # 80 ms requests to 300 ms (3 of 12 = 25 %, at the limit). Kept: median 80 (adopt); every request: median 100.
    a, b = "base", "treated"
    claim = Claim(TTFT_P50, a, b)
    runs = []
    for r in range(1, 6):
        jitter = 1 + 0.002 * r
        runs.append(arm_run(a, r, {i: 100.0 * jitter for i in range(12)}))
        ttft = {i: (300.0 if i in (2, 3, 4) else 80.0 if i < 8 else 100.0) * jitter for i in range(12)}
        recs = records(ttft)
        stalls = [Stall(0, recs[i].first_token_s - 0.2, recs[i].first_token_s) for i in (2, 3, 4)]
        judged = stall_validity(recs, stalls, stall_ms=20.0, late_ms=None)
        assert judged["valid_for"]["ttft"] and [e["index"] for e in judged["excluded"]["ttft"]] == [2, 3, 4]
        result = {"conclusion": {"failure": None, "valid": not judged["reasons"],
                                 "invalid_reasons": judged["reasons"]},
                  "details": {"server_metrics": {}, "client": {"stalls": judged}}}
        runs.append(ArmRun(label=b, repeat=r, result_path=Path(f"{b}/r{r}.json"), result=arm_result(result),
                           records=recs))
    res = claim_effect(runs, claim, seed=0, resamples=0)
    work = res.excluded_work
    assert (work.decision_kept, work.decision_all, work.agree) == ("adopt", "inconclusive", False)
    assert res.decision == "inconclusive" and "capped at inconclusive: with the 15 request(s)" in res.reason
    assert 0.79 < res.effect.value < 0.81 and 0.99 < work.effect_all.value < 1.01
    assert res.to_dict()["validity"]["decision_all"] == "inconclusive"


def lagged_copy_run(label: str, repeat: int, phase_s: float) -> ArmRun:
    """A bench-68 copy arm run beside a niced job: 4 requests of 32 tokens one after another (TTFT 300 ms, a token
    every 100 ms), the client's loop held 30 ms every 0.5 s (from ``phase_s``), so its loop-lag P99 is past 20 ms."""
    recs, t = [], 0.0
    for i in range(4):
        chunks = tuple(t + 0.3 + 0.1 * k for k in range(32))
        recs.append(RequestRecord(index=i, status="length", scheduled_s=t, sent_s=t, first_token_s=chunks[0],
                                  end_s=chunks[-1], chunk_s=chunks, completion_tokens=32, output_tokens_requested=32))
        t = chunks[-1]
    stalls = tuple(Stall(0, phase_s + 0.5 * k, phase_s + 0.5 * k + 0.03) for k in range(int(t / 0.5)))
    health = ClientHealth(loop_lag_p99_ms=20.0 + 26 * phase_s, loop_lag_max_ms=30.0, workers=1, lag_samples=2000,
                          stalls=stalls)
    judged = stall_record(recs, health, ValidityLimits(), timed=False)
    result = {"conclusion": {"failure": None, "valid": not judged["reasons"], "invalid_reasons": judged["reasons"]},
              "details": {"server_metrics": {}, "client": {"stalls": judged}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"{label}/r{repeat}.json"), result=arm_result(result),
                  records=tuple(recs))


def test_bench68s_lagged_arms_are_kept_for_their_per_request_claims_without_a_rerun():
    # the recorded run: 28 of 33 arm runs had a loop-lag P99 of 20-46 ms beside a niced job; judged as a whole each
    # was invalid and the bench stopped. Judged per request, an ordinary 30 ms stall moves a 3.4 s E2E or TPOT by
    # under 1 %: the runs are invalid for their rates only and kept for bench-68's TPOT and E2E claims.
    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 4121, 0.97),), 3, 0.0)
    reruns = Reruns(3, Reporter(io.StringIO()), host=busy, probe=lambda: busy, metrics=(TPOT_P50, E2E_P50))
    ran = []
    for i, (repeat, label) in enumerate((r, lab) for r in range(1, 12) for lab in ("off", "ngram-k4", "draft-10L")):
        phase = 0.05 + 0.4 * ((i * 7) % 11) / 11
        ran.append(reruns.settle(lagged_copy_run(label, repeat, phase), lambda n: pytest.fail("no re-run")))
    assert reruns.failure is None and reruns.done == [] and len(ran) == 33
    reasons = [why for r in ran for why in r.result.conclusion.invalid_reasons]
    assert all(not r.valid for r in ran) and all(why.startswith("client stalls") for why in reasons)
    assert sum("its rates over the run are moved" in why for why in reasons) == 33  # the P99 judges the rates
    assert all(usable(r, TPOT_P50) and usable(r, E2E_P50) and not usable(r, OUTPUT_TOKENS_PER_S) for r in ran)
    res = claim_effect(ran, Claim(E2E_P50, "off", "ngram-k4"), seed=0, resamples=0)
    assert res.effect.n_pairs == 11  # every pair kept
