"""Send lag judged over an arm's repeats pooled, where each repeat alone has too few sends to be judged.

A run's own send-lag rule (``harness.serving.validity.schedule_reasons``) is judged only over ``min_lag_samples``
(50) sends, since the P99 of fewer is their maximum; every arm run of bench-00, 68 and 69 sends fewer, so their
send lag went unjudged. The repeats of one arm run the same workload on the same schedule, so their sends are one
sample of the client's lateness: pooled, they are judged by the same two checks (P95 against 5 % of the TTFT P50
and the mean arrival gap, P99 against 5 % of the TTFT P99; ``lag_limit_ms``), with the limits each run recorded.
When the pooled lag fails, the runs that hold a send later than the failed limit are invalid ("client send lag
... pooled over N repeats"): their late sends are the ones that moved the arrivals or their own latency; the runs
whose sends all kept the schedule stay valid. Runs already judged alone (>= 50 sends) are not pooled. A search's
probes (bench-72: one run per rate) are pooled per candidate by its own reading (``judge_pool``) on the load check
alone against the fastest probe's gap: its verdicts count latency from the scheduled send, where a late send can
only add to a latency; what it can flatter is the load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from harness.bench.records import ArmRun
from harness.contract.distribution import PERCENTILE_METHOD
from harness.serving.validity import ValidityLimits, lag_limit_ms


def limits_of(run: ArmRun) -> ValidityLimits:
    recorded = run.result.detail("validity_limits") or {}
    fields = ValidityLimits.__dataclass_fields__
    return ValidityLimits(**{k: v for k, v in recorded.items() if k in fields})


def _lags_ms(run: ArmRun) -> list[float]:
    return [r.send_lag_s * 1e3 for r in run.records if r.send_lag_s is not None]


def _scheduled_gap_ms(run: ArmRun) -> float | None:
    """The mean gap between a run's scheduled sends (ms), from its records."""
    times = sorted(r.scheduled_s for r in run.records if r.scheduled_s is not None)
    return 1e3 * (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 and times[-1] > times[0] else None


def _percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float | None]:
    """The ``qs`` percentiles of ``values`` by the kit's method; None each when there are none."""
    if not values:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(values, qs, method=PERCENTILE_METHOD)]


def _pooled_stats(runs: Sequence[ArmRun], load_only: bool = False) -> dict[str, Any]:
    """The figures ``lag_limit_ms`` reads, over the runs' requests pooled (the mean arrival gap: the runs' mean).
    ``load_only``: latency counts from the scheduled send, so a late send moves only the load: no TTFT reference,
    and the gap is the fastest run's (where a late send moves the load most)."""
    lags = [x for run in runs for x in _lags_ms(run)]
    p95, p99 = _percentiles(lags, (95, 99))
    if load_only:
        gaps = [g for run in runs if (g := _scheduled_gap_ms(run))]
        return {"sends": len(lags), "send_lag_p95_ms": p95, "send_lag_p99_ms": None, "ttft_p50_ms": None,
                "ttft_p99_ms": None, "mean_arrival_gap_ms": min(gaps) if gaps else None}
    ttft = [(r.first_token_s - r.sent_s) * 1e3 for run in runs for r in run.records
            if r.completed and r.first_token_s is not None and r.sent_s is not None]
    gaps = [g for run in runs if (g := run.result.detail("client", "mean_arrival_gap_ms"))]
    t50, t99 = _percentiles(ttft, (50, 99))
    return {"sends": len(lags), "send_lag_p95_ms": p95, "send_lag_p99_ms": p99, "ttft_p50_ms": t50,
            "ttft_p99_ms": t99, "mean_arrival_gap_ms": float(np.mean(gaps)) if gaps else None}


def judge_arm(runs: Sequence[ArmRun], label: str) -> tuple[dict[str, Any] | None, dict[int, str]]:
    """The pooled judgement of ``label``'s valid runs too small to be judged alone (None if there are none), and
    the reason for each repeat it makes invalid."""
    small = [r for r in runs if r.label == label and too_small(r)]
    record, reasons = judge_pool(small, label, "repeats")
    if record is not None:
        record["repeats"] = [r.repeat for r in small]
        record.pop("runs", None)
    return record, {small[i].repeat: why for i, why in reasons.items()}


def judge_pool(small: Sequence[ArmRun], name: str, unit: str = "runs", *,
               load_only: bool = False) -> tuple[dict[str, Any] | None, dict[int, str]]:
    """The pooled judgement of ``small`` (runs of one arm, or one search's probes, each too small to be judged
    alone; the caller picks them) as ``name``, and the reason for each run (by its index in ``small``) it makes
    invalid: the runs holding a send later than the failed limit. ``load_only``: only the load check
    (``_pooled_stats``), for readings whose latencies count from the scheduled send."""
    if not small:
        return None, {}
    limits = limits_of(small[0])
    stats = _pooled_stats(small, load_only)
    record: dict[str, Any] = {"arm": name, "runs": [r.label for r in small], "sends": stats["sends"],
                              "send_lag_p95_ms": _round(stats["send_lag_p95_ms"]),
                              "send_lag_p99_ms": _round(stats["send_lag_p99_ms"]), "judged": False, "failed": []}
    if stats["sends"] < limits.min_lag_samples:
        record["why"] = f"{stats['sends']} sends pooled < {limits.min_lag_samples}: not judged"
        return record, {}
    record["judged"] = True
    checks = (("P95", stats["send_lag_p95_ms"], lag_limit_ms(stats, limits, limits.send_lag_p99_ms),
               "mean arrival gap" if load_only else "TTFT P50 / mean arrival gap"),
              ("P99", stats["send_lag_p99_ms"],
               lag_limit_ms(stats, limits, limits.send_lag_p99_ms, "ttft_p99_ms", gap=False), "TTFT P99"))
    failed = [(n, value, limit, what) for n, value, limit, what in checks
              if limit is not None and value is not None and value > limit]
    if not failed:
        return record, {}
    record["failed"] = [{"check": n, "value_ms": _round(v), "limit_ms": _round(lim)} for n, v, lim, _ in failed]
    first_limit = min(lim for _, _, lim, _ in failed)
    why = "; ".join(f"client send lag {n} {v:.1f} ms over {stats['sends']} sends pooled over {len(small)} {unit} "
                    f"of {record['arm']} > {lim:.1f} ms ({limits.lag_fraction:.0%} of {what})"
                    for n, v, lim, what in failed)
    reasons = {i: f"{why}: this run sent {sum(x > first_limit for x in _lags_ms(r))} of them late, so the "
                  "client could not keep its schedule"
               for i, r in enumerate(small) if max(_lags_ms(r)) > first_limit}
    record["invalid_repeats"] = sorted(small[i].repeat for i in reasons)
    return record, reasons


def too_small(run: ArmRun) -> bool:
    """A valid run with sends, too few to judge its send lag alone."""
    return (not run.failure and bool(run.records) and run.valid
            and 0 < len(_lags_ms(run)) < limits_of(run).min_lag_samples)


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _invalidated(run: ArmRun, reason: str) -> ArmRun:
    conclusion = run.result.conclusion
    invalid = replace(conclusion, valid=False, invalid_reasons=[*conclusion.invalid_reasons, reason])
    return replace(run, result=replace(run.result, conclusion=invalid))


def pooled_send_lag(runs: Sequence[ArmRun]) -> tuple[list[ArmRun], list[dict[str, Any]]]:
    """``runs`` with the pooled send-lag rule applied per arm (the runs it fails made invalid, with the reason), and
    the judgement of each arm it pooled (``details.send_lag_pooled``)."""
    out, records = list(runs), []
    for label in dict.fromkeys(r.label for r in runs):
        record, reasons = judge_arm(out, label)
        if record is not None:
            records.append(record)
        out = [_invalidated(r, reasons[r.repeat]) if r.label == label and r.repeat in reasons and r.valid else r
               for r in out]
    return out, records
