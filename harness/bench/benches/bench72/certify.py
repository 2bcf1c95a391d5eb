"""The rate bench-72 says to deploy up to: a one-sided lower bound from SLO exceedance counts, never the point.

Each probe is read over its steady window (``serving.steady``: from the first wave's turnover to the last send; the
first requests met an empty server) as an exceedance count: a request exceeds when it did not complete, or its TTFT
from the scheduled send or its TPOT broke its P99 limit. A probe whose queue grew, whose rate sits at or over the
service ceiling its candidate's overloaded probes showed (``exceedance.stationarity``), whose client fell behind
(its own send lag, or its candidate's probes' sends pooled: ``capacity``) or whose errors broke the limit counts as
all exceeding. ``harness.bench.lib.exceedance`` gives the monotone binomial point and the fixed-sequence
Clopper-Pearson lower bound, clustered by probe, each rate tested at the exceedance share its requests can show:
"deploy up to" is that bound with the share it states. The optional confirming run (``--confirm-s``) replays the
deploy point for longer and says whether the claim held there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.bench.lib.exceedance import (
    MAX_CLAIM,
    ExceedanceCapacity,
    ProbeCount,
    completion_rate,
    exceedance_capacity,
    per_rate,
    queue_verdict,
)
from harness.bench.records import ArmRun
from harness.serving.steady import window


def exceeded(rec: Any, slo: Any) -> bool:
    """Whether one request broke an SLO: not completed, TTFT from the scheduled send, or TPOT over its limit."""
    if not rec.completed or rec.first_token_s is None or rec.end_s is None:
        return True
    start = rec.scheduled_s if rec.scheduled_s is not None else rec.sent_s
    ttft_ms = 1000 * (rec.first_token_s - start)
    tokens = rec.completion_tokens or 0
    tpot_ms = 1000 * (rec.end_s - rec.first_token_s) / (tokens - 1) if tokens > 1 else 0.0
    return ttft_ms > slo.ttft_p99_ms or tpot_ms > slo.tpot_p99_ms


def probe_count(run: ArmRun, slo: Any, rate: float, broken: Sequence[str] = ()) -> ProbeCount:
    """One probe as an exceedance count over its steady window, with its queue-growth verdict, completion rate and
    span (``exceedance`` reads them against the candidate's ceiling); ``broken``: the client or error limits it broke,
    which fail it whatever it counts."""
    records = sorted((r for r in run.records if r.scheduled_s is not None), key=lambda r: r.scheduled_s or 0.0)
    bounds = window(records)
    steady = [r for r in records if bounds is None or (r.sent_s is not None and r.sent_s >= bounds[1])]
    span = records[-1].scheduled_s - records[0].scheduled_s if len(records) > 1 else 0.0  # type: ignore[operator]
    return ProbeCount(rate, tuple(exceeded(r, slo) for r in steady), "; ".join(broken), queue_verdict(records),
                      completion_rate([r.end_s for r in records if r.completed]), span)


def certified(runs: Sequence[ArmRun], rates: Sequence[float], slo: Any,
              broken: Sequence[Sequence[str]]) -> ExceedanceCapacity:
    """A candidate's exceedance capacity from its probe runs (``rates``: each run's rate on the schedule)."""
    return exceedance_capacity([probe_count(run, slo, rate, why)
                                for run, rate, why in zip(runs, rates, broken, strict=True)])


def deploy_text(name: str, ex: ExceedanceCapacity | None) -> str:
    """The sentence a summary gives for where to deploy a candidate."""
    if ex is None:
        return f"deploy {name} (no exceedance counts bound its rate)"
    if ex.lower_rps is None:
        return (f"deploy {name}, but no rate is certified to keep <= {ex.max_exceedance:.0%} of requests over the "
                f"SLOs at {ex.confidence:.0%} ({ex.status})")
    return f"deploy {name} up to {ex.lower_rps:.3g} req/s (one-sided lower bound: {ex.claim_text()})"


def bound_text(cert: ExceedanceCapacity | None) -> str:
    """A candidate's certified bound in a few words, for a summary."""
    if cert is None or cert.lower_rps is None:
        return "no rate certified"
    return (f"certified up to {cert.lower_rps:.3g} req/s (<= {cert.claim_exceedance or cert.max_exceedance:.1%} "
            "over the SLOs)")


def confirmation(run: ArmRun, slo: Any, ex: ExceedanceCapacity, probes: Sequence[ProbeCount],
                 broken: Sequence[str] = ()) -> dict[str, Any]:
    """The confirming run at the deploy point read as one more probe against the candidate's ceiling: the claim
    held when its clustered bound is within the claim's stated share (at a rate the probes supported but could not
    certify, within ``MAX_CLAIM``: the replay certifies it) and its queue did not grow."""
    rate = ex.lower_rps or ex.supported_rps or 0.0
    level = (ex.claim_exceedance or ex.max_exceedance) if ex.lower_rps else MAX_CLAIM
    count = probe_count(run, slo, rate, broken)
    [got] = per_rate([count], beside=probes)
    held = not got.failed and got.upper <= level
    return {"rate_rps": rate, "seconds": round(count.span_s, 1), "requests": got.requests, "exceeded": got.exceeded,
            "upper": got.upper, "claim_exceedance": level, "failed": list(got.failed), "held": held,
            "text": (f"confirming run at {rate:.3g} req/s over {count.span_s:.0f} s: {got.exceeded} of {got.requests} "
                     f"steady requests over the SLOs, bound {got.upper:.1%} "
                     + (f"<= {level:.1%}: held" if held else f"> {level:.1%}: not held")
                     + (f" ({'; '.join(got.failed)})" if got.failed else ""))}
