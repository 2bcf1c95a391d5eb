"""Coverage of the designs' intervals, by simulation: how often each 95 % interval holds the true value.

- bench-72's capacity (``harness.bench.lib.capacity_fit``): probes of a queue-like server, per-request TTFT
  base / (1 - rate / mu) times a unit draw of three shapes (lognormal sigma 0.4, gamma shape 4, lognormal sigma
  0.7) on the schedule 0.25 .. 8 req/s, 12 to 200 requests a probe; the truth is the rate where the P99 reaches
  the limit.
- bench-72's probes on an M/M/1 queue (``--queue``): each probe started empty and scheduled as the bench schedules
  it, the schedule centred on the saturation point or placed anywhere against it; how often the exceedance lower
  bound certifies a rate and holds at the share it states.
- bench-66's saturation bracket (``harness.bench.lib.saturation``): a 60-s-per-level sweep of the simulated
  engine at fractions of its sustained capacity; how often the bracket is determined and holds the capacity
  (exactly, and with the rule's tolerance on its low end).

Prints the figures; no assertion (the tests check single cases).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np

from harness.bench.lib.capacity_fit import ProbeSample, estimate_capacity, probe_schedule
from harness.bench.lib.exceedance import ProbeCount, completion_rate, exceedance_capacity, needed_requests, per_rate
from harness.bench.lib.saturation import FALLS_BEHIND, Level, Timeline, bracket, queue_growth, steady_throughput
from harness.bench.lib.sweep import EXTRA_RUNGS, EXTRA_STEP, RATE_FRACTIONS
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SyntheticSpec, synthetic
from harness.serving.steady import bounds

TTFT = "ttft_ms.p99"


SHAPES = {  # per-request latency around its mean, by name: the tails the interval must cover
    "lognormal 0.4": lambda rng, n: rng.lognormal(0.0, 0.4, size=n),
    "gamma 4": lambda rng, n: rng.gamma(4.0, 0.25, size=n),  # lighter-tailed than lognormal
    "lognormal 0.7": lambda rng, n: rng.lognormal(0.0, 0.7, size=n),  # heavier
}


def capacity_coverage(trials: int, resamples: int, requests: int, shape: str = "lognormal 0.4", mu: float = 5.0,
                      limit_ms: float = 600.0) -> dict:
    schedule = probe_schedule(1.0, 2.0, below=2, above=3)
    draw = SHAPES[shape]
    unit_p99 = float(np.quantile(draw(np.random.default_rng(123), 2_000_000), 0.99))
    truth = mu * (1 - 100.0 * unit_p99 / limit_ms)
    inside = widths = 0.0
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        probes = [ProbeSample(r, {TTFT: tuple((100.0 / (1 - r / mu) if r < mu else 5000.0) * draw(rng, requests))})
                  for r in schedule]
        est = estimate_capacity(probes, {TTFT: limit_ms}, resamples=resamples, seed=seed)
        inside += est.low_rps <= truth <= est.high_rps
        widths += (est.high_rps - est.low_rps) / truth
    return {"trials": trials, "requests_per_probe": requests, "shape": shape, "coverage": inside / trials,
            "mean_relative_width": widths / trials, "truth_rps": round(truth, 4)}


def mm1_probe(rate: float, mu: float, seconds: float, at_least: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    """One probe as the bench runs it, on an M/M/1 FIFO server started empty: Poisson arrivals scheduled at
    ``rate`` (the gaps scaled so the list spans (n - 1) / rate, as ``poisson_scheduled`` does) over at least
    ``seconds`` and ``at_least`` requests. Returns (scheduled send s, latency from it ms)."""
    n = max(2, at_least, math.ceil(rate * seconds) + 1)
    gaps = rng.exponential(1.0, n - 1)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps / gaps.sum() * (n - 1) / rate)])
    service = rng.exponential(1.0 / mu, n)
    ends = np.empty(n)
    free = 0.0
    for i in range(n):
        free = max(free, arrivals[i]) + service[i]
        ends[i] = free
    return arrivals, (ends - arrivals) * 1e3


def queue_probe_count(rate: float, arrivals: np.ndarray, latency_ms: np.ndarray, limit_ms: float) -> ProbeCount:
    """The probe read as the bench reads it: its steady window (from the first wave's turnover, ``steady.bounds``),
    its queue-growth verdict and completion rate (``exceedance.stationarity`` reads them against the ceiling)."""
    ends = arrivals + latency_ms / 1e3
    window = bounds(arrivals.tolist(), ends.tolist())
    start = window[1] if window else 0.0
    keep = arrivals >= start
    growth = queue_growth(Timeline(tuple(arrivals), tuple(ends), tuple(ends)), 0.05)
    return ProbeCount(rate, tuple(bool(x) for x in latency_ms[keep] > limit_ms), queue=growth.verdict,
                      completion_rps=completion_rate(ends.tolist()),
                      span_s=float(arrivals[-1] - arrivals[0]))


def held_truth(mu: float, limit_ms: float, level: float) -> float:
    """The stationary M/M/1 rate at which ``level`` of requests exceed the limit: P(T > L) = exp(-(mu - lambda) L)."""
    return mu - math.log(1 / level) / (limit_ms / 1e3)


def confirmed(lower: float | None, counts: list[ProbeCount], mu: float, limit_ms: float, seconds: float,
              rng: np.random.Generator) -> tuple[float, bool] | None:
    """A confirming run of ``seconds`` at the certified rate read as the bench reads it (``per_rate`` beside the
    probes): its clustered bound on the share over the limit, and whether that bound covers the true stationary
    share there (M/M/1: exp(-(mu - lambda) L)); None without a certified rate or a confirming run."""
    if lower is None or not seconds:
        return None
    arrivals, lat = mm1_probe(lower, mu, seconds, 12, rng)
    [got] = per_rate([queue_probe_count(lower, arrivals, lat, limit_ms)], beside=counts)
    true_share = math.exp(-(mu - lower) * limit_ms / 1e3) if lower < mu else 1.0
    return got.upper, bool(got.failed) or got.upper >= true_share


def queue_coverage(trials: int, resamples: int, binding: float, probe_seconds: float, requests: int,
                   mu: float = 2.0, offset: float | None = 1.0, confirm_s: float = 0.0) -> dict:
    """bench-72's probes on a queue: the schedule centred on ``offset`` x the saturation point (mu; None: a
    log-uniform draw in [1/sqrt 2, sqrt 2] per run, a schedule placed anywhere against the capacity) with one rung
    below and three above, each probe started empty, a candidate stopping after two broken probes. The truth is the
    stationary capacity: for M/M/1 FIFO the latency is exponential with rate mu - lambda, so P(T > L) = 1 % at
    lambda* = mu - ln(100) / L, set to ``binding`` x mu; a claim at a looser level q holds up to mu - ln(1/q) / L."""
    limit_ms = math.log(100.0) / ((1 - binding) * mu) * 1e3
    truth = binding * mu
    old_in = old_point_ok = new_ok = certified = p99_ok = 0
    ratios, lows, levels, confirms = [], [], [], []
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        centre = mu * (offset if offset is not None else 2 ** rng.uniform(-0.5, 0.5))
        samples, counts, broke = [], [], 0
        for rate in probe_schedule(centre, 2.0, below=1, above=3):
            arrivals, lat = mm1_probe(rate, mu, probe_seconds, requests, rng)
            samples.append(ProbeSample(rate, {TTFT: tuple(lat)}))
            counts.append(queue_probe_count(rate, arrivals, lat, limit_ms))
            broke = broke + 1 if np.percentile(lat, 99) > limit_ms else 0
            if broke == 2:
                break
        old = estimate_capacity(samples, {TTFT: limit_ms}, resamples=resamples, seed=seed)
        old_in += old.low_rps is not None and old.low_rps <= truth <= old.high_rps
        old_point_ok += old.capacity_rps is not None and old.capacity_rps <= truth
        ratios.append((old.capacity_rps or 0.0) / truth)
        new = exceedance_capacity(counts)
        certified += new.lower_rps is not None
        new_ok += new.lower_rps is None or new.lower_rps <= held_truth(mu, limit_ms, new.claim_exceedance or 0.01)
        p99_ok += new.lower_rps is None or new.lower_rps <= truth
        lows.append((new.lower_rps or 0.0) / truth)
        levels += [new.claim_exceedance] if new.claim_exceedance else []
        confirms += [c] if (c := confirmed(new.lower_rps or new.supported_rps, counts, mu, limit_ms, confirm_s,
                                           rng)) else []
    return {"trials": trials, "binding": binding, "probe_seconds": probe_seconds, "truth_rps": truth,
            "old_coverage": old_in / trials, "old_point_meets_slo": old_point_ok / trials,
            "old_median_ratio": float(np.median(ratios)), "new_lower_holds": new_ok / trials,
            "new_lower_under_p99_truth": p99_ok / trials, "new_certified": certified / trials,
            "new_median_lower_ratio": float(np.median(lows)),
            "new_median_level": float(np.median(levels)) if levels else None, "confirmed": len(confirms),
            "confirm_median_bound": float(np.median([b for b, _ in confirms])) if confirms else None,
            "confirm_covers": sum(c for _, c in confirms) / len(confirms) if confirms else None}


def _sim(rate: float, requests: int, seed: int, cost: StepCostModel, closed: int = 0) -> list:
    """The simulated engine's records for ``requests`` of the bench's shape: Poisson arrivals *scheduled* at ``rate``
    (the draws of ``seed`` scaled so the n - 1 gaps span (n - 1) / rate, as ``arrival.poisson_scheduled`` does), or
    a closed loop of ``closed``."""
    wl = synthetic(SyntheticSpec(requests=requests, rate_rps=1.0, input_mean=128, output_mean=16, spread=0.25,
                                 seed=seed))
    if closed:
        wl = replace(wl, requests=tuple(replace(r, arrival_s=None) for r in wl.requests), concurrency=closed)
    else:
        stretch = (requests - 1) / rate / wl.requests[-1].arrival_s
        wl = replace(wl, requests=tuple(replace(r, arrival_s=r.arrival_s * stretch) for r in wl.requests))
    run, _ = run_continuous(wl, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512), cost)
    return sorted(run.records, key=lambda r: r.index)


def bracket_coverage(trials: int, fractions: tuple[float, ...] = RATE_FRACTIONS, tolerance: float = 0.05,
                     level_s: float = 60.0, at_least: int = 100) -> dict:
    """Sweeps as bench-66 runs them: a closed-loop probe sets the ladder, every level's list shares the sweep's
    draws, is scheduled at its rate and spans ``level_s`` with at least ``at_least`` requests, and levels above the
    first that falls behind are not run (up to ``EXTRA_RUNGS`` more above the ladder when none does). The truth is
    a 3000-request closed loop's steady rate."""
    determined = held = within = 0
    seconds = widths = 0.0
    for seed in range(trials):
        cost = StepCostModel(base_ms=20.0 + seed % 7, prefill_ms_per_token=0.5, decode_ms_per_seq=4.0)
        long = _sim(1.0, 3000, 1000 + seed, cost, closed=16)
        mu, _ = steady_throughput([r.admitted_s or 0.0 for r in long], [r.finish_s for r in long], 16)
        short = _sim(1.0, math.ceil(1.2 * mu * level_s) + 16, 2000 + seed, cost, closed=16)
        probe, _ = steady_throughput([r.admitted_s or 0.0 for r in short], [r.finish_s for r in short], 16)
        levels = []
        rungs = [fraction * probe for fraction in fractions]
        for rate in rungs:  # the rungs above the ladder, appended below, too
            rs = _sim(rate, max(at_least, math.ceil(rate * level_s) + 1), 10 * seed, cost)
            growth = queue_growth(Timeline(tuple(r.arrival_s for r in rs), tuple(r.first_token_s for r in rs),
                                           tuple(r.finish_s for r in rs)), tolerance)
            seconds += max(r.finish_s for r in rs) - min(r.arrival_s for r in rs)
            levels.append(Level(f"{rate:g}", growth.scheduled_rps or 0.0, growth.verdict))
            if growth.verdict == FALLS_BEHIND:
                break
            if rate == rungs[-1] and len(rungs) < len(fractions) + EXTRA_RUNGS:
                rungs.append(rate * EXTRA_STEP)
        sat = bracket(levels)
        determined += sat.determined
        if sat.determined:
            held += sat.low.scheduled_rps <= mu <= sat.high.scheduled_rps
            # a level leaving less than ``tolerance`` of its load queued keeps up by the rule: the low end may lie
            # up to mu / (1 - tolerance)
            within += sat.low.scheduled_rps <= mu / (1 - tolerance) and mu <= sat.high.scheduled_rps
            widths += (sat.high.scheduled_rps - sat.low.scheduled_rps) / mu
    return {"trials": trials, "determined": determined, "held": held, "within_tolerance": within,
            "mean_level_s_per_capacity": seconds / trials, "mean_relative_width": widths / max(1, determined)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--ladder", action="append", default=[],
                        help="bench-66 rate fractions to compare, comma-separated (repeatable; default: the bench's)")
    parser.add_argument("--only-bracket", action="store_true", help="skip bench-72's capacity interval")
    parser.add_argument("--queue", action="store_true", help="also bench-72's probes on a simulated queue")
    parser.add_argument("--only-queue", action="store_true", help="only bench-72's probes on a simulated queue")
    args = parser.parse_args()
    if not args.only_bracket and not args.only_queue:
        for shape in SHAPES:
            for requests in (12, 28, 100, 200):
                got = capacity_coverage(args.trials, args.resamples, requests, shape)
                print(f"bench-72 capacity interval, {shape} latencies, {requests} requests/probe: coverage "
                      f"{got['coverage']:.0%} over {got['trials']} trials (nominal 95 %), mean width "
                      f"{got['mean_relative_width']:.0%} of the truth {got['truth_rps']} req/s", flush=True)
    if args.queue or args.only_queue:
        print(f"a 1 % exceedance claim at 95 % needs >= {needed_requests()} requests at a rate without an exceedance")
        for seconds, offset in ((10.0, 1.0), (10.0, None), (300.0, 1.0), (300.0, None)):
            for binding in (0.75, 0.9):
                q = queue_coverage(args.trials, args.resamples, binding, seconds, 12, offset=offset)
                placed = "centred on mu" if offset else "placed anywhere"
                level = "-" if q["new_median_level"] is None else f"{q['new_median_level']:.1%}"
                print(f"bench-72 on an M/M/1 queue (probes started empty, >= {seconds:g} s, schedule {placed}, SLO "
                      f"binding at {binding:g} mu = {q['truth_rps']:g} req/s): fitted-P99 interval covers the "
                      f"stationary capacity {q['old_coverage']:.0%}, its point meets the SLO "
                      f"{q['old_point_meets_slo']:.0%}, median point {q['old_median_ratio']:.2f}x the truth; "
                      f"exceedance lower bound certified a rate in {q['new_certified']:.0%} of runs (median claim "
                      f"<= {level} exceeding), held at its stated share (<= that share's stationary rate, or none) in "
                      f"{q['new_lower_holds']:.0%}, under the P99 capacity in {q['new_lower_under_p99_truth']:.0%}, "
                      f"median {q['new_median_lower_ratio']:.2f}x the P99 capacity", flush=True)
        for binding in (0.75, 0.9):
            q = queue_coverage(args.trials, args.resamples, binding, 10.0, 12, offset=None, confirm_s=300.0)
            print(f"bench-72 on an M/M/1 queue, >= 10-s probes placed anywhere and a 300-s confirming run at the "
                  f"certified (else supported) rate (SLO binding at {binding:g} mu): ran in {q['confirmed']} of "
                  f"{q['trials']} runs, its bound on the share over the limit (median "
                  f"{q['confirm_median_bound']:.1%}) covered the true stationary share there in "
                  f"{q['confirm_covers']:.0%}", flush=True)
        if args.only_queue:
            return
    ladders = [tuple(float(f) for f in ladder.split(",")) for ladder in args.ladder] or [RATE_FRACTIONS]
    for fractions in ladders:
        sat = bracket_coverage(max(5, args.trials // 5), fractions)
        ladder = ", ".join(f"{f:g}" for f in fractions)
        print(f"bench-66 saturation bracket (simulated engine, levels >= 60 s and >= 100 requests at {ladder} x the "
              f"probe): determined in {sat['determined']}/{sat['trials']} sweeps, holding the sustained capacity in "
              f"{sat['held']} of them, within the 5 % tolerance of it in {sat['within_tolerance']}; mean width "
              f"{sat['mean_relative_width']:.0%} of the capacity; levels {sat['mean_level_s_per_capacity']:.0f} s "
              f"a sweep", flush=True)


if __name__ == "__main__":
    main()
