"""Capacity from SLO exceedance counts: the rates a server can be deployed up to with a stated confidence.

An SLO "P99 <= L" holds at a rate when at most 1 % of the requests served there exceed L (MLPerf LoadGen's reading
of a percentile constraint). Each probe gives, per rate, its requests in the steady window and how many exceeded
any limit; a probe that could not be read as stationary (``stationarity``: its queue grew; or its rate is not below
the completion rate the candidate's overloaded probes showed, less the tolerance; or, with no overloaded probe, its
queue was not shown flat), whose client fell behind or whose errors broke the limit counts every request as
exceeding.

- **Service ceiling**: a probe whose completions fell behind its arrivals (its completion rate, completed requests
  per second between its first and last end, under ``1 - GROWTH_TOLERANCE`` of its scheduled rate) measured what the
  server completes when it cannot keep up; the smallest such rate of a candidate is its ceiling (a short probe's
  reading is noisy; the largest let a rung at the ceiling count in 1 run in 8). A rate at or above
  ``1 - GROWTH_TOLERANCE`` of it is never read as stationary: a queue at utilisation near 1 grows like the square
  root of time, which no slope test of a finite probe tells from a flat one.
- **Claim level**: each rate is tested at the exceedance share its steady-window requests can show, never under
  ``MAX_EXCEEDANCE``: with n requests and none exceeding, the one-sided Clopper-Pearson bound is 1 - 0.05^(1/n)
  (28 requests: 10 %; 299: 1 %). The certified claim states the largest level of the rates it rests on, so a short
  probe's claim is the looser one it can make, said as such, never a P99 it cannot show; a rate whose requests
  cannot show a share under ``MAX_CLAIM`` (25 %) ends the sequence uncertified, so candidates are never ranked by
  claims that say nothing of an SLO.
- **Independent requests**: near its ceiling a queue's latencies come in excursions as long as its relaxation time
  (M/M/1: 1 / (c (1 - sqrt rho)^2) at utilisation rho of the ceiling c), so a probe counts at most
  ``1 / RELAX_PER_DRAW`` requests per relaxation time of its span (``independent_requests``); with a schedule placed
  anywhere against the capacity, counting every request let a rung at 0.8 of it certify a 1 % claim it breaks (2 %)
  in 1 run in 8.

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
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from harness.bench.lib.capacity_fit import isotonic
from harness.bench.lib.saturation import FALLS_BEHIND, KEEPS_UP, UNDETERMINED, Timeline, queue_growth
from harness.contract.distribution import binomial_upper

BATCH = 10  # consecutive requests of one probe per cluster for the design effect
MAX_EXCEEDANCE = 0.01  # a P99 limit: at most 1 % of requests may exceed it
CONFIDENCE = 0.95
GROWTH_TOLERANCE = 0.05
RELAX_PER_DRAW = 0.25  # draws per relaxation time: an excursion's requests count as 4 independent ones
MAX_CLAIM = 0.25  # the loosest share a certified claim may state: one request in four over an SLO is no SLO claim


@dataclass(frozen=True)
class ProbeCount:
    """One probe's steady-window requests, in scheduled order, each True when it exceeded a limit."""

    rate_rps: float
    exceeded: Sequence[bool]
    failed: str = ""  # why the probe cannot count (queue grew, client behind, errors): all exceed
    queue: str = KEEPS_UP  # its queue-growth verdict (``queue_verdict``)
    completion_rps: float | None = None  # completed requests per second between its first and last end
    span_s: float = math.inf  # its scheduled arrivals' span


def completion_rate(end_s: Sequence[float | None]) -> float | None:
    """Completed requests after the first per second between the first and the last end (None below two)."""
    ends = sorted(e for e in end_s if e is not None)
    return (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 and ends[-1] > ends[0] else None


def ceiling(probes: Sequence[ProbeCount], tolerance: float = GROWTH_TOLERANCE) -> float | None:
    """The smallest completion rate of the probes whose completions fell behind their arrivals (module docstring)."""
    behind = [p.completion_rps for p in probes
              if p.completion_rps is not None and p.completion_rps < (1 - tolerance) * p.rate_rps]
    return min(behind) if behind else None


def relaxation_s(rate_rps: float, ceiling_rps: float) -> float:
    """An M/M/1 queue's relaxation time at utilisation rho = rate / ceiling: 1 / (c (1 - sqrt rho)^2) (inf at >= 1)."""
    rho = rate_rps / ceiling_rps
    return math.inf if rho >= 1 else 1 / (ceiling_rps * (1 - math.sqrt(rho)) ** 2)


def independent_requests(probe: ProbeCount, ceiling_rps: float | None) -> int:
    """The probe's steady requests as independent draws: at most one per relaxation time of its span (its queue's
    excursions last that long, so its exceedances come in runs that long); all of them with no ceiling known."""
    n = len(probe.exceeded)
    if ceiling_rps is None or math.isinf(probe.span_s):
        return n
    return min(n, math.floor(probe.span_s / RELAX_PER_DRAW / relaxation_s(probe.rate_rps, ceiling_rps)))


def stationarity(verdict: str, rate_rps: float = 0.0, ceiling_rps: float | None = None,
                 tolerance: float = GROWTH_TOLERANCE) -> str:
    """Why a probe with this queue-growth verdict (``saturation.queue_growth``) at ``rate_rps`` cannot be read as
    stationary, or "" when it can. One whose queue grew fails. With a service ceiling (``ceiling``) a probe counts
    when its rate is under ``1 - tolerance`` of it, whatever its slopes could show; at or above, it fails even when
    its slopes read flat. With none, only a probe whose TTFT and backlog slopes are shown at or under the tolerance
    ("keeps up") counts: one too short or too close to saturation to tell fails."""
    if verdict == FALLS_BEHIND:
        return "queue grew"
    if ceiling_rps is not None:
        if rate_rps < (1 - tolerance) * ceiling_rps:
            return ""
        return f"at or over {1 - tolerance:.0%} of the {ceiling_rps:.3g} req/s the server completed when overloaded"
    return "" if verdict == KEEPS_UP else f"queue growth not ruled out ({verdict}; no overloaded probe sets a ceiling)"


def claim_level(requests: int, max_exceedance: float = MAX_EXCEEDANCE, confidence: float = CONFIDENCE) -> float:
    """The smallest exceedance share ``requests`` without an exceedance can show (module docstring), >= the floor."""
    return max(max_exceedance, 1 - (1 - confidence) ** (1 / requests)) if requests > 0 else 1.0


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
    level: float = MAX_EXCEEDANCE  # the exceedance share this rate is tested at (``claim_level`` of its requests)


def per_rate(probes: Sequence[ProbeCount], max_exceedance: float = MAX_EXCEEDANCE, confidence: float = CONFIDENCE,
             beside: Sequence[ProbeCount] = ()) -> list[RateCount]:
    """Counts pooled per rate (low to high) with the clustered one-sided bound and the level each is tested at; a
    probe that cannot be read as stationary against the service ceiling of these and the ``beside`` probes
    (``stationarity``) fails."""
    top = ceiling([*probes, *beside])
    probes = [replace(p, failed="; ".join(filter(None, [p.failed, stationarity(p.queue, p.rate_rps, top)])))
              for p in probes]
    out = []
    for rate in sorted({p.rate_rps for p in probes}):
        at = [p for p in probes if p.rate_rps == rate]
        n = sum(len(p.exceeded) for p in at)
        k = sum(len(p.exceeded) if p.failed else sum(p.exceeded) for p in at)
        failed = tuple(p.failed for p in at if p.failed)
        draws = sum(independent_requests(p, top) for p in at)
        deff = max(design_effect(at), n / draws) if draws else n + 1.0  # no independent draw: none counts
        n_eff = math.floor(n / deff)
        k_eff = min(n_eff, math.ceil(k / deff))
        upper = 1.0 if failed or n_eff <= 0 else binomial_upper(k_eff, n_eff, confidence)
        out.append(RateCount(rate, n, k, round(deff, 3), round(upper, 5), failed,
                             round(claim_level(n_eff if n_eff > 0 else n, max_exceedance, confidence), 5)))
    return out


@dataclass(frozen=True)
class ExceedanceCapacity:
    point_rps: float | None  # where the monotone fit crosses max_exceedance
    lower_rps: float | None  # one-sided lower bound: deploy up to this rate
    status: str
    max_exceedance: float  # the floor every rate is tested at (a P99 limit: 1 %)
    confidence: float
    needed_requests: int  # requests a rate needs to be tested at the floor
    rates: tuple[RateCount, ...] = field(default=())
    claim_exceedance: float | None = None  # the share the certified claim states: its rates' largest level
    ceiling_rps: float | None = None  # the service ceiling the stationarity reading used (``ceiling``)
    # the last rate passing at its own level, however loose: where a confirming run may certify what probes could not
    supported_rps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rates": [asdict(r) for r in self.rates]}

    def claim_text(self) -> str:
        """The certified claim in words: the share of requests over the SLO limits, at what confidence."""
        level = self.claim_exceedance or self.max_exceedance
        looser = (f"; {self.needed_requests} requests a rate would show <= {self.max_exceedance:.0%}"
                  if level > self.max_exceedance else "")
        return f"<= {level:.1%} of requests over the SLO limits at {self.confidence:.0%}{looser}"

    def text(self) -> str:
        point = "none" if self.point_rps is None else f"{self.point_rps:.3g} req/s"
        if self.lower_rps is None:
            return f"exceedance fit {point}; no rate certified ({self.status})"
        return (f"deploy up to {self.lower_rps:.3g} req/s (one-sided lower bound: {self.claim_text()}); "
                f"exceedance fit {point}")


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
    """The point, the one-sided lower bound (fixed-sequence Clopper-Pearson, clustered; each rate at its own
    ``level``) and each rate's counts."""
    rates = per_rate(probes, max_exceedance, confidence)
    point, status = monotone_point(rates, max_exceedance)
    need = needed_requests(max_exceedance, confidence)
    lower, supported, why, levels = None, None, "", []
    for r in rates:
        if r.failed or r.upper > r.level or not r.requests:
            why = why or (f"at {r.rate_rps:g} req/s {r.exceeded} of {r.requests} requests exceeded, bound "
                          f"{r.upper:.1%} > {r.level:.1%}" + (f" ({'; '.join(r.failed)})" if r.failed else "")
                          + (f"; a P99 claim needs >= {need} requests a rate" if r.requests < need else ""))
            break
        supported = r.rate_rps
        if r.level > MAX_CLAIM and not why:
            why = (f"at {r.rate_rps:g} req/s {r.requests} requests count as too few independent ones to show any "
                   f"share under {MAX_CLAIM:.0%} (at best {r.level:.1%}); a P99 claim needs >= {need} a rate")
        if not why:
            lower = r.rate_rps
            levels.append(r.level)
    if lower is None:
        status = why or status
    return ExceedanceCapacity(point, lower, status if lower is None else f"certified; {status}", max_exceedance,
                              confidence, need, tuple(rates), max(levels) if levels else None, ceiling(probes),
                              supported)
