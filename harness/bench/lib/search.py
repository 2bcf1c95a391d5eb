"""Capacity search: the highest request rate at which every SLO holds, with an interval.

A pure state machine over probes (rate, passed). ``next_rate`` reads every probe so far
and says which rate to measure next, or None when the search is done:

1. bracket: from ``start_rps``, multiply by ``growth`` while every probed rate holds,
   divide while the lowest probed rate does not;
2. bisect: the geometric midpoint of the bracket [lower, first failing rate] until
   their ratio is at most 1 + ``rel_tol``;
3. confirm: repeat the lower end and the first failing rate (then the lowest rate
   that failed in every run) until each has ``repeats`` runs. A repeat that flips a
   verdict moves the bracket, and bisection resumes where it is too wide.

A rate *holds* when every run at it passed. ``lower`` is the highest rate such that it
and every probed rate below it hold: the capacity. ``upper`` is the lowest rate above it
at which every run failed. Rates between them passed in some runs and failed in others:
the interval [lower, upper] is where the SLO boundary lies, as measured. Rates are
rounded to ``digits`` significant digits so that a repeat is recognised as the same rate.
The search never runs more than ``max_probes`` probes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SearchConfig:
    start_rps: float
    growth: float = 2.0
    rel_tol: float = 0.25
    repeats: int = 3
    max_probes: int = 12
    min_rps: float = 0.01
    max_rps: float = 10_000.0
    digits: int = 3

    def rate(self, value: float) -> float:
        """``value`` rounded to the search's significant digits."""
        return float(f"{value:.{self.digits}g}")


@dataclass(frozen=True)
class Probe:
    """One measured run at a rate: whether every SLO held, and which limits it broke."""

    rate_rps: float
    passed: bool
    violated: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RateTally:
    runs: int
    passes: int

    @property
    def holds(self) -> bool:
        return self.passes == self.runs

    @property
    def fails(self) -> bool:
        return self.passes == 0


def tally(probes: Sequence[Probe]) -> dict[float, RateTally]:
    """Runs and passes per probed rate, in ascending rate order."""
    out: dict[float, list[int]] = {}
    for p in probes:
        runs = out.setdefault(p.rate_rps, [0, 0])
        runs[0] += 1
        runs[1] += int(p.passed)
    return {rate: RateTally(*out[rate]) for rate in sorted(out)}


def bounds(probes: Sequence[Probe]) -> tuple[float | None, float | None, float | None]:
    """(lower, first failing rate, upper) as defined in the module docstring; None where there is none."""
    table = tally(probes)
    lower = first_fail = upper = None
    for rate, t in table.items():
        if first_fail is None:
            if t.holds:
                lower = rate
                continue
            first_fail = rate
        if t.fails:
            upper = rate
            break
    return lower, first_fail, upper


def wanted_rate(cfg: SearchConfig, probes: Sequence[Probe]) -> float | None:
    """The rate the search wants next regardless of its probe budget, or None when it is done."""
    if not probes:
        return cfg.rate(min(max(cfg.start_rps, cfg.min_rps), cfg.max_rps))
    table = tally(probes)
    lower, first_fail, upper = bounds(probes)
    if lower is None:  # the lowest probed rate does not hold: go down
        down = cfg.rate(min(table) / cfg.growth)
        return down if down >= cfg.min_rps else None
    if first_fail is None:  # every probed rate holds: go up
        up = cfg.rate(max(table) * cfg.growth)
        return up if up <= cfg.max_rps else None
    if first_fail / lower > 1 + cfg.rel_tol:
        mid = cfg.rate(math.sqrt(lower * first_fail))
        if lower < mid < first_fail:
            return mid
    for rate in (lower, first_fail, upper):
        if rate is not None and table[rate].runs < cfg.repeats:
            return rate
    if upper is None:  # the first failing rate passed in some runs: find a rate that fails in every run
        up = cfg.rate(max(table) * cfg.growth)
        return up if up <= cfg.max_rps else None
    return None


def next_rate(cfg: SearchConfig, probes: Sequence[Probe]) -> float | None:
    """The next rate to probe, or None when the search is done or its budget is spent."""
    return None if len(probes) >= cfg.max_probes else wanted_rate(cfg, probes)


@dataclass(frozen=True)
class Capacity:
    """The search's answer: capacity (lower), the interval's upper end, and how the search ended."""

    capacity_rps: float | None
    upper_rps: float | None
    status: str
    probes: int
    confirmed: bool
    rates: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.capacity_rps is None:
            return f"none ({self.status})"
        upper = f"{self.upper_rps:g}" if self.upper_rps is not None else "not reached"
        return f"{self.capacity_rps:g} req/s [{self.capacity_rps:g}, {upper}]"


def capacity(cfg: SearchConfig, probes: Sequence[Probe]) -> Capacity:
    """Read the capacity and its interval from the probes (the search may have stopped early)."""
    table = tally(probes)
    lower, first_fail, upper = bounds(probes)
    unfinished = wanted_rate(cfg, probes) is not None
    why = "the probe budget was spent" if len(probes) >= cfg.max_probes else "the search was stopped"
    if not probes:
        status = "not searched"
    elif lower is None:
        status = f"{why} before any rate held" if unfinished else f"no probed rate held (down to {min(table):g} req/s)"
    elif first_fail is None:
        status = (f"{why} before any rate failed" if unfinished
                  else f"every probed rate held (up to {max(table):g} req/s, the search's ceiling)")
    elif unfinished:
        status = f"{why} before the bracket was confirmed"
    else:
        status = ("bracketed" if upper is not None
                  else f"bracketed; no rate failed in every run up to {max(table):g} req/s")
    confirmed = (
        lower is not None
        and upper is not None
        and table[lower].runs >= cfg.repeats
        and table[upper].runs >= cfg.repeats
    )
    rates = {f"{r:g}": {"runs": t.runs, "passes": t.passes} for r, t in table.items()}
    return Capacity(
        capacity_rps=lower, upper_rps=upper, status=status, probes=len(probes), confirmed=confirmed, rates=rates
    )


def binding(probes: Sequence[Probe]) -> tuple[tuple[str, ...], float | None]:
    """The limit(s) broken at the lowest rate where any limit broke, and that rate: what gives way first."""
    broken = sorted((p.rate_rps, p.violated) for p in probes if not p.passed and p.violated)
    if not broken:
        return (), None
    rate = broken[0][0]
    names = dict.fromkeys(name for r, violated in broken if r == rate for name in violated)
    return tuple(names), rate
