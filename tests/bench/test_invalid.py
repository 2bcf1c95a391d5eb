"""Invalid arm runs redone in their place and named with a recommendation, replayed on recorded failures."""

from __future__ import annotations

import io
from functools import partial
from pathlib import Path

from harness.bench.benches import bench69
from harness.bench.invalid import Reruns, constraint_of, named, recommendations
from harness.bench.outputs import summary_text
from harness.bench.records import ArmRun
from harness.progress import Reporter
from tests.bench.test_analysis import read, records

UNIQUE, SHARED, CONTROL = bench69.UNIQUE, bench69.SHARED, bench69.CONTROL
# bench-69 on a host with one niced CPU-bound job beside it: the recorded reason of its one invalid arm run
LOOP_LAG = ("client event-loop lag P99 77.5 ms > 20.0 ms (5% of TTFT P99 / mean arrival gap) with 1 client "
            "process(es): the client is a bottleneck")
SEND_LAG = "client send lag P95 5.3 ms over 164 sends > 4.1 ms (5% of TTFT P50 / mean arrival gap): the client ..."


def arm_run(label: str, repeat: int, ttft_ms: dict[int, float], reasons: tuple[str, ...] = (),
            attempt: int = 1) -> ArmRun:
    result = {"conclusion": {"failure": None, "valid": not reasons, "invalid_reasons": list(reasons)},
              "performance": {"throughput": {"duration_s": 3.0}}, "details": {"server_metrics": {}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"{label}/r{repeat}-a{attempt}.json"), result=result,
                  records=records(ttft_ms))


def bench69_step(repeat: int, label: str, stalled: set[tuple[str, int, int]], attempt: int = 1) -> ArmRun:
    """One arm run of the recorded bench-69 (effect x0.134): cold 1000 ms, hits 134 ms on all but each group's
    first request, the control on its own start; ``stalled`` (arm, repeat, attempt) met the competing job."""
    spread = 1 + 0.004 * ((repeat * 7 + len(label)) % 5 - 2)  # a little start-to-start noise, deterministic
    cold = {i: 1000.0 * spread for i in range(8)}
    ttft = {SHARED: {i: cold[i] if i < 2 else 134.0 * spread * (1 + 0.01 * (repeat % 3)) for i in range(8)},
            UNIQUE: cold, CONTROL: {i: 995.0 * spread for i in range(8)}}[label]
    reasons = (LOOP_LAG,) if (label, repeat, attempt) in stalled else ()
    return arm_run(label, repeat, ttft, reasons, attempt)


def replay(stalled: set[tuple[str, int, int]], budget: int) -> tuple[list[ArmRun], Reruns]:
    """The bench's fixed steps (5 rounds of its three arms) through the runner's re-run rule."""
    reruns, runs = Reruns(budget, Reporter(io.StringIO())), []
    for repeat in range(1, 6):
        for label in (UNIQUE, SHARED, CONTROL):
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
    runs = [bench69_step(r, label, {(SHARED, 3, 1)}) for r in range(1, 6) for label in (UNIQUE, SHARED, CONTROL)]
    reading = named(read(runs), runs)
    assert (reading.decision, reading.evidence_level, reading.effect.n_pairs) == ("inconclusive", "single", 4)
    assert 0.12 < reading.effect.value < 0.15 and reading.effect.ci_high < 1 / 1.05  # beyond the margin already
    (entry,) = reading.invalid_runs
    assert (entry["arm"], entry["repeat"], entry["reasons"]) == (SHARED, 3, [LOOP_LAG])
    assert "raise --repeats" not in reading.next_step and "already lies beyond the margin" in reading.next_step
    assert reading.recommendations == (recommendations([LOOP_LAG])[0],)
    text = summary_text("bench-69", "", reading, {"conclusion": conclusion(reading)}, 1.0)
    flat = " ".join(text.split())  # the summary is wrapped for a terminal
    assert f"invalid or undecided: - {SHARED} repeat 3 (left out of every effect and figure it would distort): " \
           f"{LOOP_LAG}" in flat
    assert "recommendations: - client schedule: the client ran late" in flat
    assert "raise --repeats" not in text


def test_bench69s_recorded_stall_is_rerun_in_place_and_the_replay_adopts():
    runs, reruns = replay({(SHARED, 3, 1)}, budget=3)
    assert reruns.failure is None and len(runs) == 15
    assert [(r["arm"], r["repeat"], r["attempt"], r["reasons"]) for r in reruns.done] == [(SHARED, 3, 2, [LOOP_LAG])]
    assert runs[7].result_path == Path(f"{SHARED}/r3-a2.json")  # the re-run took the stalled run's place
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
    assert (runs[-1].label, runs[-1].repeat, runs[-1].valid) == (UNIQUE, 4, False) and len(runs) == 10


def test_one_recommendation_per_failed_constraint_in_the_order_met():
    reasons = [LOOP_LAG, SEND_LAG, "2 of 40 requests did not complete (2 timeout)", LOOP_LAG,
               "achieved send rate 90.0% of the scheduled rate < 95%"]
    advice = recommendations(reasons, host="competing: stress (pid 41, 98% of a core)")
    assert [a.split(":")[0] for a in advice] == ["client schedule", "requests completed"]
    assert advice[0].endswith("(competing: stress (pid 41, 98% of a core))") and "competing" not in advice[1]
    assert constraint_of("repeat 2: client-bound here: the client and API server used 1.30 cores").name == \
        "client CPU share"
    assert constraint_of("something new").name == "other"
