"""Saturation by queue growth, checked on sweeps the simulated engine replays deterministically.

The rate at which a steady-state run stops keeping up is the engine's sustained capacity mu: the completion
rate of a long refilling closed loop (3000 requests). A sweep of 60-s levels at fractions of mu must bracket it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from harness.bench.lib.saturation import (
    FALLS_BEHIND,
    INVALID,
    KEEPS_UP,
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
from harness.bench.lib.sweep import RATE_FRACTIONS
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SyntheticSpec, synthetic
from harness.workload.arrival import poisson_scheduled

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


def test_the_bracket_is_undetermined_with_invalid_levels_between_or_no_transition():
    ok = [Level("a", 1.0, KEEPS_UP), Level("b", 2.0, KEEPS_UP), Level("c", 3.0, UNDETERMINED),
          Level("d", 4.0, FALLS_BEHIND), Level("e", 5.0, FALLS_BEHIND)]
    sat = bracket(ok)
    assert sat.determined and (sat.low.label, sat.high.label) == ("b", "d")  # an undetermined level only widens it
    holed = bracket([*ok[:2], Level("c", 3.0, INVALID), *ok[3:]])
    assert not holed.determined and "invalid levels between" in holed.reason and "undetermined" in holed.text
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
