"""Capacity from every probe: an isotonic log-log fit crossed with the SLO, its resampled interval, and ties."""

from __future__ import annotations

import numpy as np
import pytest

from harness.bench.lib.capacity_fit import (
    Estimate,
    ProbeSample,
    crossing,
    estimate_capacity,
    isotonic,
    probe_schedule,
    rank,
)

TTFT = "ttft_ms.p99"
SCHEDULE = probe_schedule(1.0, 2.0, below=2, above=3)  # 0.25 .. 8 req/s


def server(mu: float, seed: int, requests: int = 200) -> list[ProbeSample]:
    """Probes of an M/M/1-like server: per-request TTFT lognormal around 100 ms / (1 - rate/mu), past mu 10x."""
    rng = np.random.default_rng(seed)
    out = []
    for rate in SCHEDULE:
        scale = 100.0 / (1 - rate / mu) if rate < mu else 100.0 * 50
        out.append(ProbeSample(rate, {TTFT: tuple(scale * rng.lognormal(0.0, 0.4, size=requests))}))
    return out


def test_the_schedule_is_a_geometric_ladder_around_the_start():
    assert SCHEDULE == (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    assert probe_schedule(0.769, 2 ** 0.5, 1, 1) == (0.544, 0.769, 1.09)


def test_isotonic_pools_violators_and_the_crossing_interpolates_in_log_log():
    assert isotonic([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([2.0, 1.0], [3, 1]) == [1.75, 1.75]
    rate, status = crossing([1.0, 2.0, 4.0], [-1.0, -np.log(2), np.log(2)])  # P99 at 0.5x, then 2x the limit
    assert status == "crossed" and rate == pytest.approx(2 + 2 * (2 - 1) / (2 - 0.5))  # 1/P99 linear in rate
    assert crossing([1.0, 2.0], [-1.0, -0.1]) == (2.0, "above the schedule")
    assert crossing([1.0, 2.0], [0.1, 0.2]) == (1.0, "below the schedule")


def test_capacity_lies_between_grid_points_and_its_interval_covers_the_truth():
    # true crossing: P99 = 100 ms x exp(0.4 x 2.326) / (1 - r/mu) = 600 ms  ->  r = mu (1 - 0.2535 / ...)
    mu, limit = 5.0, 600.0
    p99_at_zero = 100.0 * np.exp(0.4 * 2.3263)
    truth = mu * (1 - p99_at_zero / limit)
    est = estimate_capacity(server(mu, seed=1), {TTFT: limit}, resamples=500, seed=0)
    assert est.status == "crossed" and est.capacity_rps not in SCHEDULE
    assert 2.0 < est.capacity_rps < 4.0 and est.low_rps <= truth <= est.high_rps
    assert est.low_rps < est.capacity_rps < est.high_rps and est.binding == TTFT


def test_two_candidates_that_differ_only_in_noise_are_tied_and_the_cheaper_is_chosen():
    a = estimate_capacity(server(5.0, seed=11), {TTFT: 600.0}, resamples=500, seed=0)
    b = estimate_capacity(server(5.0, seed=12), {TTFT: 600.0}, resamples=500, seed=0)
    ranking = rank({"fp32": a, "bf16": b}, {"fp32": 1.2, "bf16": 0.7}, "peak memory GiB")
    assert set(ranking.tied) == {"fp32", "bf16"} and ranking.chosen == "bf16"
    assert ranking.reason.startswith("tie:") and "cheaper by peak memory GiB" in ranking.reason


def test_a_clearly_faster_candidate_stands_alone():
    fast = estimate_capacity(server(20.0, seed=3), {TTFT: 600.0}, resamples=300, seed=0)
    slow = estimate_capacity(server(2.0, seed=4), {TTFT: 600.0}, resamples=300, seed=0)
    ranking = rank({"fast": fast, "slow": slow}, {"fast": 9.0, "slow": 1.0}, "peak memory GiB")
    assert ranking.tied == ("fast",) and ranking.chosen == "fast"
    assert rank({"x": Estimate(None, None, None, "below the schedule", None, 0)}, {}, "m").chosen is None


def test_a_broken_probe_counts_as_over_the_limit():
    samples = server(50.0, seed=5)  # every probe is fast ...
    broken = [ProbeSample(s.rate_rps, s.latencies_ms, broken=s.rate_rps >= 4.0) for s in samples]  # ... but 4+ broke
    est = estimate_capacity(broken, {TTFT: 600.0}, resamples=100, seed=0)
    assert est.status == "crossed" and 2.0 < est.capacity_rps < 4.0


def test_the_interval_holds_the_truth_at_the_benchs_small_probes():
    # 20 requests a probe: the empirical P99 is the probe's maximum, and resampling it alone held the truth in
    # about 1 of 10 simulated runs; the union with the lognormal fit's interval must hold it in most
    mu, limit = 5.0, 600.0
    truth = mu * (1 - 100.0 * np.exp(0.4 * 2.3263) / limit)
    held = sum(
        (est := estimate_capacity(server(mu, seed=seed, requests=20), {TTFT: limit}, resamples=300, seed=seed))
        .low_rps <= truth <= est.high_rps
        for seed in range(20)
    )
    assert held >= 15, held
