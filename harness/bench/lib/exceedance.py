"""Capacity from SLO exceedance counts: the rates a server can be deployed up to with a stated confidence.

An SLO "P99 <= L" holds at a rate when at most 1 % of the requests served there exceed L (MLPerf LoadGen's reading
of a percentile constraint). Each probe gives, per rate, its requests in the steady window and how many exceeded
any limit; a probe that could not be read as stationary (its queue grew or was not shown not to grow: ``stationarity``;
its client fell behind; its errors broke the limit) counts every request as exceeding.

- **Point**: the monotone binomial fit — the exceedance share against rate by isotonic regression weighted by
  requests (pool-adjacent-violators: the maximum-likelihood fit of a share that never falls as load grows) — and
  the rate where it crosses ``max_exceedance``, interpolated linearly between the probed rates either side.
- **Deploy up to**: the one-sided lower bound. Rates are tested low to high (fixed-sequence testing, so the whole
  sequence holds its 5 % error rate): a rate passes when the one-sided Clopper-Pearson upper bound of its
  exceedance share is at most ``max_exceedance``; the bound is the last rate that passed before the first that
  did not. Requests of one probe are not independent (a queue's latencies come in runs), so each probe is cut
  into batches of ``BATCH`` consecutive requests, the batch counts' variance over its binomial value is the design
  effect, and the counts enter the bound divided by it (Kish's effective sample size): clustered by probe.
- **Needed n**: with no exceedance at all, n requests show <= 1 % at 95 % only from n = ln(0.05) / ln(0.99) =
  299 up (``needed_requests``); a probe of fewer can never certify a rate, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.bench.lib.capacity_fit import isotonic
from harness.bench.lib.saturation import FALLS_BEHIND, KEEPS_UP, UNDETERMINED, Timeline, queue_growth
from harness.contract.distribution import binomial_upper

BATCH = 10  # consecutive requests of one probe per cluster for the design effect
MAX_EXCEEDANCE = 0.01  # a P99 limit: at most 1 % of requests may exceed it
CONFIDENCE = 0.95
GROWTH_TOLERANCE = 0.05  # bench-66's: a queue slope over 5 % of the load left unserved is growth


@dataclass(frozen=True)
class ProbeCount:
    """One probe's steady-window requests, in scheduled order, each True when it exceeded a limit."""

    rate_rps: float
    exceeded: Sequence[bool]
    failed: str = ""  # why the probe is not read as stationary (queue grew, client behind, errors): all exceed


def stationarity(verdict: str) -> str:
    """Why a probe with this queue-growth verdict (``saturation.queue_growth``) cannot be read as stationary, or ""
    when it can: only a probe whose TTFT and backlog slopes are shown at or under the tolerance ("keeps up") counts;
    one whose queue grew fails, and so does one too short or too close to saturation to tell (a queue at
    utilisation 1 grows like the square root of time, which a short probe cannot tell from a flat one)."""
    if verdict == KEEPS_UP:
        return ""
    return "queue grew" if verdict == FALLS_BEHIND else f"queue growth not ruled out ({verdict})"


def queue_verdict(records: Sequence[Any], tolerance: float = GROWTH_TOLERANCE) -> str:
    """bench-66's queue-growth verdict (``saturation.queue_growth``) over one probe's requests in scheduled order."""
    timed = sorted(((r.scheduled_s, r) for r in records if r.scheduled_s is not None), key=lambda x: x[0])
    if len(timed) < 2:
        return UNDETERMINED
    return queue_growth(Timeline(tuple(t for t, _ in timed), tuple(r.first_token_s for _, r in timed),
                                 tuple(r.end_s for _, r in timed)), tolerance).verdict


def needed_requests(max_exceedance: float = MAX_EXCEEDANCE, confidence: float = CONFIDENCE) -> int:
    """Requests without an exceedance that show a share <= ``max_exceedance`` at ``confidence`` (299 for 1 %, 95 %)."""
    return math.ceil(math.log(1 - confidence) / math.log(1 - max_exceedance))


def design_effect(probes: Sequence[ProbeCount], batch: int = BATCH) -> float:
    """Variance of the batch exceedance counts over their binomial variance (>= 1; 1 with no or all exceedances)."""
    counts = [sum(p.exceeded[i:i + batch]) for p in probes if not p.failed
              for i in range(0, len(p.exceeded) - batch + 1, batch)]
    n = len(counts) * batch
    share = sum(counts) / n if n else 0.0
    if len(counts) < 2 or share in (0.0, 1.0):
        return 1.0
    return max(1.0, float(np.var(counts, ddof=1)) / (batch * share * (1 - share)))


@dataclass(frozen=True)
class RateCount:
    rate_rps: float
    requests: int
    exceeded: int
    design_effect: float
    upper: float  # one-sided Clopper-Pearson upper bound on the exceedance share, at the effective counts
    failed: tuple[str, ...] = ()


def per_rate(probes: Sequence[ProbeCount], confidence: float = CONFIDENCE) -> list[RateCount]:
    """Counts pooled per rate (low to high) with the clustered one-sided bound."""
    out = []
    for rate in sorted({p.rate_rps for p in probes}):
        at = [p for p in probes if p.rate_rps == rate]
        n = sum(len(p.exceeded) for p in at)
        k = sum(len(p.exceeded) if p.failed else sum(p.exceeded) for p in at)
        failed = tuple(p.failed for p in at if p.failed)
        deff = design_effect(at)
        n_eff = math.floor(n / deff)
        k_eff = min(n_eff, math.ceil(k / deff))
        upper = 1.0 if failed or n_eff <= 0 else binomial_upper(k_eff, n_eff, confidence)
        out.append(RateCount(rate, n, k, round(deff, 3), round(upper, 5), failed))
    return out


@dataclass(frozen=True)
class ExceedanceCapacity:
    point_rps: float | None  # where the monotone fit crosses max_exceedance
    lower_rps: float | None  # one-sided lower bound: deploy up to this rate
    status: str
    max_exceedance: float
    confidence: float
    needed_requests: int
    rates: tuple[RateCount, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rates": [asdict(r) for r in self.rates]}

    def text(self) -> str:
        point = "none" if self.point_rps is None else f"{self.point_rps:.3g} req/s"
        if self.lower_rps is None:
            return f"exceedance fit {point}; no rate certified ({self.status})"
        return (f"deploy up to {self.lower_rps:.3g} req/s ({self.confidence:.0%} lower bound, <= "
                f"{self.max_exceedance:.0%} exceeding); exceedance fit {point}")


def monotone_point(rates: Sequence[RateCount], max_exceedance: float) -> tuple[float | None, str]:
    """The rate where the isotonic exceedance share crosses ``max_exceedance`` (linear between probed rates)."""
    if not rates:
        return None, "not probed"
    fit = isotonic([r.exceeded / r.requests if r.requests else 1.0 for r in rates], [max(1, r.requests) for r in rates])
    over = next((i for i, f in enumerate(fit) if f > max_exceedance), None)
    if over is None:
        return rates[-1].rate_rps, "above the schedule"
    if over == 0:
        return None, "below the schedule"
    r0, r1, f0, f1 = rates[over - 1].rate_rps, rates[over].rate_rps, fit[over - 1], fit[over]
    return r0 + (max_exceedance - f0) / (f1 - f0) * (r1 - r0), "crossed"


def exceedance_capacity(probes: Sequence[ProbeCount], max_exceedance: float = MAX_EXCEEDANCE,
                        confidence: float = CONFIDENCE) -> ExceedanceCapacity:
    """The point, the one-sided lower bound (fixed-sequence Clopper-Pearson, clustered) and each rate's counts."""
    rates = per_rate(probes, confidence)
    point, status = monotone_point(rates, max_exceedance)
    need = needed_requests(max_exceedance, confidence)
    lower, why = None, ""
    for r in rates:
        if r.upper > max_exceedance:
            why = (f"at {r.rate_rps:g} req/s {r.exceeded} of {r.requests} requests exceeded, bound "
                   f"{r.upper:.1%} > {max_exceedance:.0%}" + (f" ({'; '.join(r.failed)})" if r.failed else "")
                   + (f"; a rate needs >= {need} requests without an exceedance" if r.requests < need else ""))
            break
        lower = r.rate_rps
    if lower is None:
        status = why or status
    return ExceedanceCapacity(point, lower, status if lower is None else f"certified; {status}", max_exceedance,
                              confidence, need, tuple(rates))
