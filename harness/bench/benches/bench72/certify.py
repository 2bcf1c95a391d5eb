"""The rate bench-72 says to deploy up to: a one-sided lower bound from SLO exceedance counts, never the point.

Each probe is read over its steady window (``serving.steady``: from the first wave's turnover to the last send; the
first requests met an empty server) as an exceedance count: a request exceeds when it did not complete, or its TTFT
from the scheduled send or its TPOT broke its P99 limit. A probe whose queue was not shown stationary
(``exceedance.stationarity``: it grew, or too few requests or too close to saturation to tell), whose client fell
behind or whose errors broke the limit counts as all exceeding. ``harness.bench.lib.exceedance`` then gives the
monotone binomial point and the fixed-sequence Clopper-Pearson lower bound, clustered by probe: "deploy up to" is
that bound, and below ``needed_requests`` (299) requests at a rate no rate can be certified, which it says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.bench.benches.bench72.capacity import CLIENT, ERRORS, SLO, verdict
from harness.bench.lib.exceedance import (
    ExceedanceCapacity,
    ProbeCount,
    exceedance_capacity,
    queue_verdict,
    stationarity,
)
from harness.bench.records import ArmRun
from harness.bench.spec import History
from harness.serving.steady import window


def exceeded(rec: Any, slo: SLO) -> bool:
    """Whether one request broke an SLO: not completed, TTFT from the scheduled send, or TPOT over its limit."""
    if not rec.completed or rec.first_token_s is None or rec.end_s is None:
        return True
    start = rec.scheduled_s if rec.scheduled_s is not None else rec.sent_s
    ttft_ms = 1000 * (rec.first_token_s - start)
    tokens = rec.completion_tokens or 0
    tpot_ms = 1000 * (rec.end_s - rec.first_token_s) / (tokens - 1) if tokens > 1 else 0.0
    return ttft_ms > slo.ttft_p99_ms or tpot_ms > slo.tpot_p99_ms


def probe_count(run: ArmRun, slo: SLO, rate: float) -> ProbeCount:
    """One probe as an exceedance count over its steady window, failed where it cannot be read as stationary."""
    records = sorted((r for r in run.records if r.scheduled_s is not None), key=lambda r: r.scheduled_s or 0.0)
    bounds = window(records)
    steady = [r for r in records if bounds is None or (r.sent_s is not None and r.sent_s >= bounds[1])]
    broken = [v for v in verdict(run, slo, rate).violated if v in (CLIENT, ERRORS)]
    why = "; ".join([*broken, *filter(None, [stationarity(queue_verdict(records))])])
    return ProbeCount(rate, tuple(exceeded(r, slo) for r in steady), why)


def certified(runs: Sequence[ArmRun], rates: Sequence[float], slo: SLO) -> ExceedanceCapacity:
    """A candidate's exceedance capacity from its probe runs (``rates``: each run's rate on the schedule)."""
    return exceedance_capacity([probe_count(run, slo, rate) for run, rate in zip(runs, rates, strict=True)])


def certifications(history: History, names: Sequence[str], slo: SLO | None) -> dict[str, ExceedanceCapacity]:
    """Each searched candidate's exceedance capacity, from its probe runs in the History."""
    labels = history.notes.get("probes", {})
    out: dict[str, ExceedanceCapacity] = {}
    if slo is None:
        return out
    for name in names:
        runs = [r for r in history.runs if r.label in labels and labels[r.label]["candidate"] == name
                and not r.failure and r.records]
        if runs:
            out[name] = certified(runs, [labels[r.label]["rate_rps"] for r in runs], slo)
    return out


def deploy_text(name: str, ex: ExceedanceCapacity | None) -> str:
    """The sentence a summary gives for where to deploy a candidate."""
    if ex is None:
        return f"deploy {name} (no exceedance counts bound its rate)"
    if ex.lower_rps is None:
        return (f"deploy {name}, but no rate is certified to keep <= {ex.max_exceedance:.0%} of requests over the "
                f"SLOs at {ex.confidence:.0%} ({ex.status})")
    return f"deploy {name} up to {ex.lower_rps:.3g} req/s ({ex.confidence:.0%} one-sided lower bound)"
