"""Saturation by queue growth, checked on sweeps the simulated engine replays deterministically.

The rate at which a steady-state run stops keeping up is the engine's sustained capacity mu: the completion
rate of a long refilling closed loop (3000 requests). A sweep of 60-s levels at fractions of mu must bracket it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.bench.lib.saturation import (
    FALLS_BEHIND,
    INVALID,
    KEEPS_UP,
    LATE_FALLS_BEHIND,
    MIN_VERDICT_REQUESTS,
    UNDETERMINED,
    Level,
    Timeline,
    bracket,
    outstanding,
    queue_growth,
    scheduled_rate,
    steady_throughput,
    window_slope,
)
from harness.bench.lib.sweep import RATE_FRACTIONS, LoadSweep
from harness.bench.records import ArmRun
from harness.bench.spec import History
from harness.client.records import RequestRecord
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SyntheticSpec, synthetic
from harness.workload import Arrival, Common
from harness.workload.arrival import poisson_scheduled
from tests.typed_results import arm_result

COST = StepCostModel(base_ms=20.0, prefill_ms_per_token=0.5, decode_ms_per_seq=4.0)  # a slow CPU-like server
ENGINE = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512)
SHAPE = {"input_mean": 128, "output_mean": 16, "spread": 0.25}


def level(rate: float, requests: int, seed: int = 0) -> Timeline:
    wl = synthetic(SyntheticSpec(requests=requests, rate_rps=rate, seed=seed, **SHAPE))
    run, _ = run_continuous(wl, ENGINE, COST)
    rs = sorted(run.records, key=lambda r: r.index)
    return Timeline(tuple(r.arrival_s for r in rs), tuple(r.first_token_s for r in rs), tuple(r.finish_s for r in rs))


def capacity(concurrency: int, requests: int) -> tuple[float | None, float]:
    wl = synthetic(SyntheticSpec(requests=requests, rate_rps=1.0, seed=5, **SHAPE))
    wl = replace(wl, requests=tuple(replace(r, arrival_s=None) for r in wl.requests), concurrency=concurrency)
    run, _ = run_continuous(wl, ENGINE, COST)
    return steady_throughput([r.admitted_s or 0.0 for r in run.records], [r.finish_s for r in run.records],
                             concurrency)


@pytest.fixture(scope="module")
def mu() -> float:
    rate, window_s = capacity(16, 3000)
    assert rate is not None and window_s > 300
    return rate


def test_a_sweep_of_sixty_second_levels_brackets_the_sustained_capacity(mu):
    probe, window_s = capacity(16, max(100, math.ceil(1.2 * mu * 60)))  # what bench-66's probe measures
    assert probe == pytest.approx(mu, rel=0.05) and window_s >= 60
    levels = []
    for fraction in RATE_FRACTIONS:  # bench-66's default ladder
        rate = fraction * probe
        line = level(rate, poisson_scheduled(rate, 60.0, seed=2, at_least=100)[1])
        growth = queue_growth(line, tolerance=0.05)
        assert line.span_s >= 55 and growth.requests >= 100
        levels.append(Level(f"{fraction:g}", growth.scheduled_rps or 0.0, growth.verdict))
    sat = bracket(levels)
    assert sat.determined and sat.low is not None and sat.high is not None
    assert sat.low.scheduled_rps <= mu <= sat.high.scheduled_rps, (sat.text, mu)
    assert levels[0].verdict == KEEPS_UP and levels[-1].verdict == FALLS_BEHIND


def test_a_level_too_short_to_read_a_slope_from_gets_no_verdict_and_one_long_enough_is_rarely_misread(mu):
    # Below the minimum, short light levels were misread as falling behind (2.7 % of draws at 0.4 mu and 16
    # requests, 18 % at 0.75 mu and 30): the verdict is withheld, the slopes still reported.
    short = [queue_growth(level(0.4 * mu, 16, seed), tolerance=0.05) for seed in range(100)]
    assert {g.verdict for g in short} == {UNDETERMINED} and all(g.backlog_slope is not None for g in short)
    # At the minimum, a level at 0.75 of the capacity falls behind in at most 2 % of 300 draws (0.7 % seen).
    misread = sum(queue_growth(level(0.75 * mu, MIN_VERDICT_REQUESTS, seed), tolerance=0.05).verdict == FALLS_BEHIND
                  for seed in range(300))
    assert misread <= 6
    # ... and a level well past it is still seen to fall behind at the minimum.
    behind = sum(queue_growth(level(1.6 * mu, MIN_VERDICT_REQUESTS, seed), tolerance=0.05).verdict == FALLS_BEHIND
                 for seed in range(50))
    assert behind >= 45


def test_scheduled_rate_is_what_the_arrivals_had_not_the_nominal_rate():
    line = level(4.0, 101)
    assert scheduled_rate(line.scheduled_s) == pytest.approx(100 / line.span_s)
    assert scheduled_rate(line.scheduled_s) != pytest.approx(4.0, rel=0.05)  # this seed's list runs slow


def test_the_slope_interval_covers_a_known_line_and_a_growing_backlog_is_seen():
    t = [i * 0.5 for i in range(200)]
    noise = np.random.default_rng(3).normal(0.0, 1.0, size=len(t))
    slope = window_slope(t, [0.2 * x + e for x, e in zip(t, noise, strict=True)], (0.0, t[-1]))
    assert slope is not None and slope.low < 0.2 < slope.high and slope.high - slope.low < 0.05
    assert slope.windows == 10
    # two sends a second, one end a second: the backlog grows by one a second
    line = Timeline(tuple(t), tuple(x + 0.1 for x in t), tuple(2.0 * x + 0.2 for x in t))
    assert outstanding(line)[-1] > outstanding(line)[10]
    growth = queue_growth(line, tolerance=0.05)
    assert growth.verdict == FALLS_BEHIND and growth.backlog_slope.value == pytest.approx(0.5, rel=0.1)


def test_the_bracket_reads_valid_levels_and_late_ones_that_fell_behind_and_needs_a_transition():
    ok = [Level("a", 1.0, KEEPS_UP), Level("b", 2.0, KEEPS_UP), Level("c", 3.0, UNDETERMINED),
          Level("d", 4.0, FALLS_BEHIND), Level("e", 5.0, FALLS_BEHIND)]
    sat = bracket(ok)
    assert sat.determined and (sat.low.label, sat.high.label) == ("b", "d")  # an undetermined level only widens it
    holed = bracket([*ok[:2], Level("c", 3.0, INVALID), *ok[3:]])  # an invalid level between is unread
    assert holed.determined and (holed.low.label, holed.high.label) == ("b", "d")
    # only sent late and still fell behind: it closes the bracket from above; an invalid "keeps up" is unread
    late = bracket([*ok[:2], Level("c", 3.0, INVALID), Level("d", 4.0, LATE_FALLS_BEHIND)])
    assert late.determined and (late.low.label, late.high.label) == ("b", "d")
    assert not bracket([*ok[:2], Level("c", 3.0, INVALID)]).determined  # nothing read fell behind
    assert not bracket(ok[:2]).determined and bracket(ok[:2]).high is None  # never fell behind
    assert "the sweep ends below saturation" in bracket(ok[:2]).reason
    unread = bracket([ok[0], Level("c", 3.0, UNDETERMINED)])  # short levels: no verdict, not "below saturation"
    assert "1 undetermined (too short to read" in unread.reason and "below saturation" not in unread.reason
    assert not bracket(ok[3:]).determined and bracket(ok[3:]).low is None  # fell behind from the first level
    again = bracket([*ok, Level("f", 6.0, KEEPS_UP)])
    assert not again.determined and "not monotone" in again.reason


def test_steady_throughput_leaves_out_the_ramp_and_the_drain():
    # concurrency 2: ends every 0.5 s from 1.0 s; last send at 5.0 s; window (1.5, 5.0]
    sent = [0.0, 0.0, *[1.0 + 0.5 * k for k in range(9)]]
    ends = [1.0 + 0.5 * k for k in range(11)]
    rate, window_s = steady_throughput(sent, ends, 2)
    assert window_s == pytest.approx(3.5) and rate == pytest.approx(7 / 3.5)
    assert steady_throughput([0.0], [1.0], 2) == (None, 0.0)


def test_queueing_on_the_decode_side_falls_behind_though_ttft_stays_flat():
    # vLLM admits prefills first: past capacity the running batch grows, TPOT and E2E with it, TTFT stays flat
    t = [i / 9.66 for i in range(580)]
    jitter = np.random.default_rng(4).normal(0.0, 0.02, size=len(t))
    first = tuple(x + 0.1 + j for x, j in zip(t, jitter, strict=True))
    growth = queue_growth(Timeline(tuple(t), first, tuple(f + 1.0 + 0.2 * x for f, x in zip(first, t, strict=True))),
                          tolerance=0.05)
    assert growth.ttft_slope.high <= 0.05 and growth.e2e_slope.low > 0.05
    assert growth.verdict == FALLS_BEHIND


def sweep_level(label: str, rate: float, *, ttft_slope: float = 0.0, decode_slope: float = 0.0,
                late_ms: float = 0.0, reasons: tuple[str, ...] = ()) -> ArmRun:
    """A recorded 60-s level at ``rate``: TTFT and E2E growing at the given slopes (s/s), 6 % of sends
    ``late_ms`` late, and the arm's invalid reasons."""
    jitter = np.random.default_rng(int(rate * 100)).normal(0.0, 0.01, size=int(60 * rate) + 1)
    records = []
    for i, e in enumerate(jitter):
        at = i / rate
        first = at + 0.1 + ttft_slope * at + e
        records.append(RequestRecord(index=i, status="length", scheduled_s=at,
                                     sent_s=at + (late_ms if i % 16 == 3 else 0.5) / 1e3, first_token_s=first,
                                     end_s=first + 1.0 + decode_slope * at, completion_tokens=16,
                                     output_tokens_requested=16))
    result = {"conclusion": {"failure": None, "valid": not reasons, "invalid_reasons": list(reasons)},
              "performance": {"throughput": {"request_rate_rps": rate, "output_tokens_per_s": 16 * rate}}}
    return ArmRun(label=label, repeat=1, result_path=Path(f"{label}.json"), result=arm_result(result),
                  records=tuple(records))


def test_bench66s_lagged_but_saturated_level_closes_the_bracket_from_above():
    # the recorded sweep: 12.1 req/s fell behind unmistakably (TTFT slope +0.256 s/s, backlog +0.334) while a
    # send-lag P95 of 5.3 ms > 4.1 ms made it invalid; late sends only lowered the load it was judged on
    late = ("client send lag P95 5.3 ms over 727 sends > 4.1 ms (5% of TTFT P50 / mean arrival gap): the client "
            "could not keep its schedule",)
    runs = [sweep_level("rate=4.83/s", 4.83), sweep_level("rate=7.25/s", 7.25), sweep_level("rate=9.66/s", 9.66),
            sweep_level("rate=12.1/s", 12.1, ttft_slope=0.256, decode_slope=0.245, late_ms=5.3, reasons=late)]
    history = History(cfg=None, model=None, runs=runs,
                      notes={"offered_rps": {r.label: float(r.label[5:-2]) for r in runs}})
    sweep = LoadSweep(Common(arrival=Arrival("closed", concurrency=1), seed=0, requests=100, input_tokens=256,
                             output_tokens=16), server="baseline", repeats=1, rates=(4.83, 7.25, 9.66, 12.1))
    reading = sweep.read(history)
    points = {p["label"]: p for p in reading.details["points"]}
    top = points["rate=12.1/s"]
    assert top["valid"] is False and top["verdict"] == LATE_FALLS_BEHIND
    (growth,) = top["growth"]
    assert growth["ttft_slope"]["low"] > 0.2 and 0.3 < growth["backlog_slope"]["value"] < 0.37
    sat = reading.details["saturation"]
    assert sat["determined"] and (sat["low_rps"], sat["high_rps"]) == pytest.approx((9.66, 12.1), rel=0.01)
    assert reading.details["baseline"]["saturation"] is not None  # a citing bench can cite it
    assert any("rate=12.1/s" in line and "read anyway: only its sends ran late" in line for line in reading.lines)
    # an invalid level for any other reason says nothing either way: the run cannot place saturation
    broke = [*runs[:3], sweep_level("rate=12.1/s", 12.1, ttft_slope=0.256, reasons=("3 of 727 requests did not "
                                                                                    "complete (3 error)",))]
    assert not sweep.read(History(cfg=None, model=None, runs=broke, notes=history.notes)).details["saturation"][
        "determined"]
