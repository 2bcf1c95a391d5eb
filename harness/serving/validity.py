"""Run validity and the correctness group: pure functions of the records and the client's stats.

A run is INVALID, with one reason per failed constraint (as MLPerf LoadGen reports),
when the client could not keep its schedule — send lag, event-loop lag, achieved
versus scheduled send rate — or when requests did not complete, or when the server
generated fewer tokens than an ``ignore_eos`` run asked for. An invalid run's
latencies describe the client, not the server.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client.records import STATUSES, RequestRecord
from harness.contract.jsonio import iter_json_lines
from harness.errors import InvalidInput
from harness.serving.metrics import PERCENTILE_METHOD


@dataclass(frozen=True)
class ValidityLimits:
    send_lag_p99_ms: float = 20.0  # sent minus the moment it could first have been sent
    loop_lag_p99_ms: float = 20.0  # event-loop wake-up lateness in any client process
    min_rate_fraction: float = 0.95  # timed schedules: scheduled span / achieved span

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class ClientHealth:
    """What the client processes measured about themselves."""

    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    workers: int
    interrupted: bool = False


def schedule_stats(records: Sequence[RequestRecord], *, timed: bool) -> dict[str, Any]:
    """Send-lag percentiles and, for timed schedules, the achieved fraction of the scheduled rate."""
    lags = np.asarray([r.send_lag_s for r in records if r.send_lag_s is not None]) * 1e3
    out: dict[str, Any] = {"send_lag_p50_ms": None, "send_lag_p99_ms": None, "rate_fraction": None}
    if lags.size:
        p50, p99 = np.percentile(lags, [50, 99], method=PERCENTILE_METHOD)
        out.update(send_lag_p50_ms=round(float(p50), 4), send_lag_p99_ms=round(float(p99), 4))
    free = [r for r in records if r.sent_s is not None and r.scheduled_s is not None and r.slot_s is None]
    if timed and len(free) > 1:
        scheduled_span = max(r.scheduled_s for r in free) - min(r.scheduled_s for r in free)
        achieved_span = max(r.sent_s for r in free) - min(r.sent_s for r in free)
        if scheduled_span > 0 and achieved_span > 0:
            out["rate_fraction"] = round(min(1.0, scheduled_span / achieved_span), 4)
    return out


def schedule_reasons(records: Sequence[RequestRecord], health: ClientHealth, limits: ValidityLimits, *,
                     timed: bool) -> list[str]:
    """The reasons the client could not keep its schedule (empty when it kept it): a run's client-side invalidity."""
    reasons = []
    stats = schedule_stats(records, timed=timed)
    if stats["send_lag_p99_ms"] is not None and stats["send_lag_p99_ms"] > limits.send_lag_p99_ms:
        reasons.append(f"client send lag P99 {stats['send_lag_p99_ms']:.1f} ms > {limits.send_lag_p99_ms:g} ms: "
                       "the client could not keep its schedule")
    if health.loop_lag_p99_ms is not None and health.loop_lag_p99_ms > limits.loop_lag_p99_ms:
        reasons.append(f"client event-loop lag P99 {health.loop_lag_p99_ms:.1f} ms > {limits.loop_lag_p99_ms:g} ms "
                       f"with {health.workers} client process(es): the client is a bottleneck")
    if stats["rate_fraction"] is not None and stats["rate_fraction"] < limits.min_rate_fraction:
        reasons.append(f"achieved send rate {stats['rate_fraction']:.1%} of the scheduled rate "
                       f"< {limits.min_rate_fraction:.0%}")
    return reasons


def invalid_reasons(records: Sequence[RequestRecord], health: ClientHealth, limits: ValidityLimits, *,
                    timed: bool, ignore_eos: bool, expected: int) -> list[str]:
    reasons = []
    if health.interrupted:
        reasons.append("the run was interrupted before every request finished")
    counts = collections.Counter(r.status for r in records)
    not_ok = {s: c for s, c in counts.items() if s not in ("stop", "length")}
    if not_ok:
        detail = ", ".join(f"{c} {s}" for s, c in sorted(not_ok.items()))
        reasons.append(f"{sum(not_ok.values())} of {expected} requests did not complete ({detail})")
    reasons += schedule_reasons(records, health, limits, timed=timed)
    if ignore_eos:
        short = [r for r in records if r.completed and r.completion_tokens is not None
                 and r.output_tokens_requested is not None and r.completion_tokens < r.output_tokens_requested]
        if short:
            reasons.append(f"{len(short)} requests generated fewer tokens than asked although ignore_eos was set")
    return reasons


def load_references(path: str | os.PathLike) -> dict[int, str]:
    """Reference outputs by request index: a previous run's ``requests.jsonl`` or JSONL of {index, text}."""
    p = Path(path)
    refs: dict[int, str] = {}
    for lineno, obj in iter_json_lines(p):
        text = obj.get("output_text", obj.get("text"))
        index = obj.get("index")
        if type(index) is not int or index < 0 or not isinstance(text, (str, type(None))):
            raise InvalidInput(f"reference outputs {p}:{lineno}: need an integer index >= 0 and output_text (or text) "
                               "as a string")
        if text is not None and obj.get("status", "stop") in ("stop", "length"):
            refs[index] = text
    return refs


def correctness(records: Sequence[RequestRecord], references: dict[int, str] | None = None) -> dict[str, Any]:
    """Fields of the correctness group: output count, termination counts, token totals, greedy agreement."""
    counts = collections.Counter(r.status for r in records)
    reported = [r.completion_tokens for r in records if r.completed and r.completion_tokens is not None]
    out: dict[str, Any] = {
        "output_count": sum(1 for r in records if r.completed),
        "termination_counts": {s: counts[s] for s in STATUSES if counts[s]},
        "output_tokens_requested": sum(r.output_tokens_requested or 0 for r in records),
        "output_tokens_reported": sum(reported) if reported else None,
        "quality": None,
        "null_reasons": {},
    }
    if not references:
        out["null_reasons"]["quality"] = "no reference outputs given"
        return out
    compared = [r for r in records if r.completed and r.index in references and r.output_text is not None]
    if not compared:
        out["null_reasons"]["quality"] = "no completed request has a reference output"
        return out
    agree = sum(r.output_text == references[r.index] for r in compared)
    out["quality"] = {"metric": "greedy_agreement", "value": round(agree / len(compared), 6), "threshold": 1.0,
                      "passed": agree == len(compared), "reference": f"{len(compared)} reference outputs, exact text match"}
    return out
