"""Capacity estimated from every probe: where the fitted P99 crosses its SLO, with an interval.

Every candidate is probed on the same schedule of Poisson rates (``probe_schedule``: a geometric ladder around a
start rate), so candidates get equal evidence whatever their order. For each latency limit, log(P99 / limit) is
fitted against log rate by isotonic regression (pool-adjacent-violators, weighted by probes per rate: latency
never falls as load grows), and the capacity is the rate where the fit crosses zero, interpolated between
the last probed rate under the limit and the first over it with 1 / P99 linear in rate (a queue's latency
curve): a rate between grid points, not a grid point. A probe whose client fell behind or whose error rate broke
its limit counts as over every limit. The capacity under several limits is the lowest crossing.

A probe's P99 is read two ways. Empirically (the 99th percentile of its requests) where it holds at least
``MIN_EMPIRICAL`` requests; below that the empirical P99 is the probe's maximum, biased low, and the point reads
the lognormal fit instead (log latency's mean + z_0.99 x its standard deviation: a location-scale model, stated).
The interval is the union of two resampled intervals: the probe's requests resampled (they are its sampling
units) with the empirical P99 recomputed, and the lognormal fit's mean and spread drawn from their sampling
distributions (normal, scaled chi-squared); each refitted and crossed ``resamples`` times, 2.5 and 97.5
percentiles. Either alone under-covers somewhere: the empirical one at few requests a probe (2-20 % coverage at
12-28 requests, 70 % at 100), the lognormal one where the tail is lighter than lognormal (30 % for gamma
latencies at 100 requests); the union held the true capacity in 85-100 % of simulated runs across those shapes
and sizes (``python benchmarks/capacity_coverage.py``). A crossing outside the schedule is censored at its end
and said so.

Two candidates whose intervals overlap are tied: the data cannot order them, and the tie is the decision (the
cheaper candidate named, with the reason it is cheaper).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from harness.contract.distribution import PERCENTILE_METHOD

OVER_CAP = math.log(10.0)  # a broken probe counts as 10x over the limit (finite, so the fit stays defined)
MIN_EMPIRICAL = 100  # requests a probe needs before its point P99 is read empirically (DESIGN.md: no P99 below ~100)
Z99 = NormalDist().inv_cdf(0.99)


def probe_schedule(start_rps: float, growth: float, below: int, above: int, digits: int = 3) -> tuple[float, ...]:
    """start x growth^k for k in [-below, above], rounded to ``digits`` significant digits."""
    return tuple(float(f"{start_rps * growth**k:.{digits}g}") for k in range(-below, above + 1))


@dataclass(frozen=True)
class ProbeSample:
    """One probe's per-request latencies (ms) at its rate; ``broken``: client behind or too many errors."""

    rate_rps: float
    latencies_ms: Mapping[str, Sequence[float]]  # limit name (e.g. "ttft_ms.p99") -> per-request values
    broken: bool = False


@dataclass(frozen=True)
class Estimate:
    capacity_rps: float | None
    low_rps: float | None
    high_rps: float | None
    status: str  # "crossed", "above the schedule", "below the schedule", "not probed"
    binding: str | None  # the limit whose crossing is the capacity
    resamples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.capacity_rps is None:
            return f"none ({self.status})"
        return f"{self.capacity_rps:.3g} req/s [{self.low_rps:.3g}, {self.high_rps:.3g}]" + (
            "" if self.status == "crossed" else f" ({self.status})"
        )


def isotonic(y: Sequence[float], w: Sequence[float]) -> list[float]:
    """Weighted non-decreasing least-squares fit of ``y`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(y, w, strict=True):
        blocks.append([float(value), float(weight), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [b[0] for b in blocks for _ in range(int(b[2]))]


def crossing(rates: Sequence[float], excess: Sequence[float]) -> tuple[float | None, str]:
    """The rate where the isotonic fit of ``excess`` (log P99/limit per probe) crosses 0."""
    by_rate: dict[float, list[float]] = {}
    for rate, value in zip(rates, excess, strict=True):
        by_rate.setdefault(rate, []).append(value)
    xs = sorted(by_rate)
    fit = isotonic([float(np.mean(by_rate[x])) for x in xs], [len(by_rate[x]) for x in xs])
    over = next((i for i, f in enumerate(fit) if f > 0), None)
    if over is None:
        return xs[-1], "above the schedule"
    if over == 0:
        return xs[0], "below the schedule"
    # between the two probed rates, 1 / latency is taken as linear in rate (M/M/1: 1/T = mu - lambda), which
    # follows a queue's convex latency curve where log-log interpolation would cut the corner
    r0, r1, inv0, inv1 = xs[over - 1], xs[over], math.exp(-fit[over - 1]), math.exp(-fit[over])
    return r0 + (inv0 - 1.0) / (inv0 - inv1) * (r1 - r0), "crossed"


def _excess(p99_ms: float | None, limit_ms: float, broken: bool) -> float:
    if broken or p99_ms is None or not p99_ms > 0:
        return OVER_CAP
    return min(OVER_CAP, math.log(p99_ms / limit_ms))


def _point(
    samples: Sequence[ProbeSample], p99s: Sequence[Mapping[str, float | None]], limits: Mapping[str, float]
) -> tuple[float | None, str, str | None]:
    rates = [s.rate_rps for s in samples]
    found = []
    for name, limit in limits.items():
        rate, status = crossing(rates, [_excess(p[name], limit, s.broken) for s, p in zip(samples, p99s, strict=True)])
        found.append((rate if rate is not None else math.inf, status, name))
    rate, status, name = min(found)
    return (None if math.isinf(rate) else rate), status, name


def _p99(values: np.ndarray) -> np.ndarray:
    return np.percentile(values, 99, axis=-1, method=PERCENTILE_METHOD)


def _lognormal_p99(values: np.ndarray) -> float | None:
    """exp(mean + z_0.99 x sd) of log ``values`` (positive ones; None below 3)."""
    logs = np.log(values[values > 0])
    return float(np.exp(logs.mean() + Z99 * logs.std(ddof=1))) if logs.size >= 3 else None


def _point_p99(values: np.ndarray) -> float | None:
    if not values.size:
        return None
    return float(_p99(values)) if values.size >= MIN_EMPIRICAL else _lognormal_p99(values)


def _draws(values: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """``resamples`` P99s of a probe two ways: its requests resampled (empirical P99), and the lognormal fit's
    mean and spread drawn from their sampling distributions; None for a probe without values."""
    if not values.size:
        return None
    empirical = _p99(values[rng.integers(0, values.size, size=(resamples, values.size))])
    logs = np.log(values[values > 0])
    if logs.size < 3:
        return empirical, empirical
    n, mean, sd = logs.size, logs.mean(), logs.std(ddof=1)
    means = mean + sd / math.sqrt(n) * rng.standard_normal(resamples)
    sds = sd * np.sqrt(rng.chisquare(n - 1, resamples) / (n - 1))
    return empirical, np.exp(means + Z99 * sds)


def _refit(samples: Sequence[ProbeSample], draws: Sequence[Mapping[str, Any]], limits: Mapping[str, float],
           which: int, resamples: int) -> list[float]:
    rates = []
    for b in range(resamples):
        p99s = [{n: (None if (d := draws[i][n]) is None else float(d[which][b])) for n in limits}
                for i in range(len(samples))]
        if (rate := _point(samples, p99s, limits)[0]) is not None:
            rates.append(rate)
    return rates


def estimate_capacity(
    samples: Sequence[ProbeSample], limits: Mapping[str, float], *, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Capacity under every limit in ``limits`` (name -> P99 limit in ms) with its resampled interval."""
    if not samples:
        return Estimate(None, None, None, "not probed", None, 0)
    values = [{n: np.asarray(s.latencies_ms.get(n) or [], dtype=float) for n in limits} for s in samples]
    observed = [{n: _point_p99(v[n]) for n in limits} for v in values]
    rate, status, binding = _point(samples, observed, limits)
    rng = np.random.default_rng(seed)
    draws = [{n: _draws(v[n], resamples, rng) for n in limits} for v in values]
    ends = []
    for which in (0, 1):  # empirical, lognormal
        finite = np.asarray(_refit(samples, draws, limits, which, resamples), dtype=float)
        if finite.size:
            ends.append((float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))))
    low, high = (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else (None, None)
    return Estimate(rate, low, high, status, binding, resamples)


@dataclass(frozen=True)
class Ranking:
    best: str | None
    tied: tuple[str, ...]  # candidates whose intervals overlap the best's (the best included)
    chosen: str | None  # the best when it stands alone; the cheapest of the tie otherwise
    reason: str


def rank(estimates: Mapping[str, Estimate], costs: Mapping[str, float | None], cost_name: str) -> Ranking:
    """The best by point estimate; ties by interval overlap; a tie is decided by the lower ``costs``."""
    found = {n: e for n, e in estimates.items() if e.capacity_rps is not None}
    if not found:
        return Ranking(None, (), None, "no candidate has a capacity on the schedule")
    best = max(found, key=lambda n: found[n].capacity_rps or 0.0)
    b = found[best]
    tied = tuple(
        n
        for n, e in found.items()
        if n == best or (e.high_rps is not None and b.low_rps is not None and e.high_rps >= b.low_rps)
    )
    if len(tied) == 1:
        return Ranking(best, tied, best, f"{best}'s capacity interval lies above every other candidate's")
    chosen = min(tied, key=lambda n: (costs.get(n) is None, costs.get(n) or 0.0, n))
    shown = ", ".join(f"{n} {format(cost, '.3g') if (cost := costs.get(n)) is not None else 'unknown'}" for n in tied)
    return Ranking(
        best,
        tied,
        chosen,
        f"tie: the capacity intervals of {', '.join(tied)} overlap; {chosen} is the cheaper by {cost_name} ({shown})",
    )
