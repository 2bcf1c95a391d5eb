"""Run validity and the correctness group: pure functions of the records and the client's stats.

A run is INVALID, with one reason per failed constraint (as MLPerf LoadGen reports),
when the client could not keep its schedule — send lag above ``lag_fraction`` (5 %)
of what it could distort (its P95 against TTFT P50 and the mean arrival gap of a timed
schedule: late sends move the arrivals; its P99 against TTFT P99: each adds to its own latency), or
event-loop lag P99 above the same share of TTFT P99 (a lateness in 1 % of wake-ups can
only move the tail), each judged only over ``min_lag_samples`` (50) sends or probes,
since a P99 of fewer is their maximum (where the client kept its loop's excursions, a stall and a late send exclude
only the requests whose figures they could move, and the run is invalid only for the figures that lose too many:
``harness.serving.stalls``); achieved versus scheduled send rate — or when requests
did not complete, or when the server generated fewer tokens than an ``ignore_eos`` run
asked for, or when the load generator alone filled the cores left beside the engine past
1 − ``engine_core_fraction`` and took more of them than the server did there ("client-bound here"; the server's
own API frontend is never charged to it; not judged where the server's CPU is not measured). An invalid run's
latencies describe the client, not the server: every bench leaves it out of the figures it would distort
(``harness.bench.claims``); an arm's runs too small to judge their send lag alone are judged pooled
(``harness.bench.sendlag``).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client.records import STATUSES, RequestRecord
from harness.contract.jsonio import iter_json_lines
from harness.errors import InvalidInput
from harness.serving.metrics import PERCENTILE_METHOD
from harness.serving.stalls import STALL_REASON, Stall, stall_validity


@dataclass(frozen=True)
class ValidityLimits:
    """The one client-lag policy: relative to what the lag could distort, judged only over enough samples."""

    send_lag_p99_ms: float = 1.0  # floor: a send lag below it never invalidates (timer granularity)
    loop_lag_p99_ms: float = 20.0  # floor for the event-loop wake-up lateness P99 (a shared host wakes late)
    min_rate_fraction: float = 0.95  # timed schedules: scheduled span / achieved span
    lag_fraction: float = 0.05  # a lag above this share of what it can move (TTFT, the mean arrival gap) distorts
    min_lag_samples: int = 50  # fewer sends (loop probes) than this: a P99 is a maximum, so not judged
    # the client and API server may use the cores left to them plus this share of the engine's (bound) cores; past
    # it they took CPU the engine needed, enough to move a latency by about the smallest effect a bench acts on
    # (5 %); normal runs on 2 cores use 0.04-0.07 cores against a limit of 1.05 (figures: docs/measurement.md)
    engine_core_fraction: float = 0.05

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class ClientHealth:
    """What the client processes measured about themselves."""

    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    workers: int
    interrupted: bool = False
    lag_samples: int | None = None  # loop probes of the client process with the fewest
    stalls: tuple[Stall, ...] | None = None  # every process's loop excursions; None: not kept (judged by the P99)


def schedule_stats(records: Sequence[RequestRecord], *, timed: bool) -> dict[str, Any]:
    """Send-lag percentiles, the lag reference (TTFT P50, mean arrival gap) and the achieved rate fraction."""
    lags = np.asarray([r.send_lag_s for r in records if r.send_lag_s is not None]) * 1e3
    out: dict[str, Any] = {"send_lag_p50_ms": None, "send_lag_p95_ms": None, "send_lag_p99_ms": None,
                           "sends": int(lags.size),
                           "rate_fraction": None, "ttft_p50_ms": None, "ttft_p99_ms": None, "mean_arrival_gap_ms": None}
    if lags.size:
        p50, p95, p99 = np.percentile(lags, [50, 95, 99], method=PERCENTILE_METHOD)
        out.update(send_lag_p50_ms=round(float(p50), 4), send_lag_p95_ms=round(float(p95), 4),
                   send_lag_p99_ms=round(float(p99), 4))
    ttft = [(r.first_token_s - r.sent_s) * 1e3 for r in records
            if r.completed and r.first_token_s is not None and r.sent_s is not None]
    if ttft:
        p50, p99 = np.percentile(ttft, [50, 99], method=PERCENTILE_METHOD)
        out.update(ttft_p50_ms=round(float(p50), 4), ttft_p99_ms=round(float(p99), 4))
    free = [(r.scheduled_s, r.sent_s) for r in records
            if r.sent_s is not None and r.scheduled_s is not None and r.slot_s is None]
    if timed and len(free) > 1:
        scheduled_at, sent_at = [s for s, _ in free], [t for _, t in free]
        scheduled_span = max(scheduled_at) - min(scheduled_at)
        achieved_span = max(sent_at) - min(sent_at)
        out["mean_arrival_gap_ms"] = round(scheduled_span / (len(free) - 1) * 1e3, 4)
        if scheduled_span > 0 and achieved_span > 0:
            out["rate_fraction"] = round(min(1.0, scheduled_span / achieved_span), 4)
    return out


def lag_limit_ms(stats: Mapping[str, Any], limits: ValidityLimits, floor_ms: float,
                 ttft_key: str = "ttft_p50_ms", *, gap: bool = True) -> float | None:
    """``lag_fraction`` of the smaller of the TTFT reference and (with ``gap``) the mean arrival gap, never below
    ``floor_ms``."""
    refs = [v for v in (stats.get(ttft_key), stats.get("mean_arrival_gap_ms") if gap else None) if v]
    return max(floor_ms, limits.lag_fraction * min(refs)) if refs else None


def stall_record(records: Sequence[RequestRecord], health: ClientHealth, limits: ValidityLimits, *,
                 timed: bool) -> dict[str, Any] | None:
    """``details.client.stalls`` (``harness.serving.stalls``): stalls past the loop-lag limit and sends past the P99
    send-lag limit (where it is judged) exclude the requests whose figures they could move; None where the excursions
    were not kept."""
    if health.stalls is None:
        return None
    stats = schedule_stats(records, timed=timed)
    stall_ms = lag_limit_ms(stats, limits, limits.loop_lag_p99_ms, "ttft_p99_ms") or limits.loop_lag_p99_ms
    late_ms = (lag_limit_ms(stats, limits, limits.send_lag_p99_ms, "ttft_p99_ms", gap=False)
               if stats["sends"] >= limits.min_lag_samples else None)
    p99 = health.loop_lag_p99_ms
    judged = health.lag_samples is None or health.lag_samples >= limits.min_lag_samples
    run_reason = (f"{STALL_REASON}: event-loop lag P99 {p99:.1f} ms > {stall_ms:.1f} ms over {health.lag_samples} "
                  f"wake-ups with {health.workers} client process(es): its rates over the run are moved"
                  if p99 is not None and judged and p99 > stall_ms else None)
    return stall_validity(records, health.stalls, stall_ms=stall_ms, late_ms=late_ms, fraction=limits.lag_fraction,
                          run_reason=run_reason)


def schedule_reasons(records: Sequence[RequestRecord], health: ClientHealth, limits: ValidityLimits, *,
                     timed: bool) -> list[str]:
    """The reasons the client could not keep its schedule (empty when it kept it): a run's client-side invalidity.
    With the loop's excursions kept, stalls and late sends are judged per request (``stall_record``) in place of
    the loop-lag P99 and the send-lag P99."""
    reasons = []
    stats = schedule_stats(records, timed=timed)
    per_request = health.stalls is not None
    # latency runs from the scheduled send, so a late send hides nothing: it moves the arrivals the server saw
    # (judged where 5 % of sends are late: P95 against the median and the mean gap) and adds its lag to its own
    # request's latency (judged where 1 % are: P99 against the TTFT P99 it can move)
    judged = stats["sends"] >= limits.min_lag_samples
    checks = (("send_lag_p95_ms", "P95", lag_limit_ms(stats, limits, limits.send_lag_p99_ms),
               "TTFT P50 / mean arrival gap"),
              ("send_lag_p99_ms", "P99", lag_limit_ms(stats, limits, limits.send_lag_p99_ms, "ttft_p99_ms", gap=False),
               "TTFT P99"))
    for key, name, limit, what in checks[:1] if per_request else checks:
        if judged and limit is not None and stats[key] > limit:
            reasons.append(f"client send lag {name} {stats[key]:.1f} ms over {stats['sends']} sends > {limit:.1f} ms "
                           f"({limits.lag_fraction:.0%} of {what}): the client could not keep its schedule")
    # a wake-up late in 1 % of probes can move only the tail it shares: judged against TTFT P99, not the median
    loop_limit = lag_limit_ms(stats, limits, limits.loop_lag_p99_ms, "ttft_p99_ms")
    judged = health.lag_samples is None or health.lag_samples >= limits.min_lag_samples
    if per_request:
        reasons += (stall_record(records, health, limits, timed=timed) or {}).get("reasons", [])
    elif health.loop_lag_p99_ms is not None and loop_limit is not None and judged and \
            health.loop_lag_p99_ms > loop_limit:
        reasons.append(f"client event-loop lag P99 {health.loop_lag_p99_ms:.1f} ms > {loop_limit:.1f} ms "
                       f"({limits.lag_fraction:.0%} of TTFT P99 / mean arrival gap) with {health.workers} client "
                       "process(es): the client is a bottleneck")
    if stats["rate_fraction"] is not None and stats["rate_fraction"] < limits.min_rate_fraction:
        reasons.append(f"achieved send rate {stats['rate_fraction']:.1%} of the scheduled rate "
                       f"< {limits.min_rate_fraction:.0%}")
    return reasons


def server_cores_left(cpu: Mapping[str, Any]) -> float:
    """The cores the server used outside the engine's bound cores: its API frontend, and the engine's own processes
    beyond its cores (vLLM's EngineCore scheduler runs on the cores left)."""
    frontend = (cpu.get("frontend_cpu_s") or 0.0) / cpu["wall_s"] if cpu.get("wall_s") else 0.0
    return frontend + max(0.0, (cpu.get("engine_cores_used") or 0.0) - len(cpu.get("engine_cores") or ()))


def cpu_share_limit(cpu: Mapping[str, Any], limits: ValidityLimits) -> float | None:
    """The cores the load generator alone may use: past both what the server left of the cores left to them (less
    ``engine_core_fraction`` of them: a core busier than that queues the server's work) and the server's own use
    there, the client saturated those cores and took most of them."""
    if not cpu.get("measured") or not cpu.get("engine_cores") or not cpu.get("cores_left"):
        # not measured, an engine bound to no core (which cores it needed is not known), or bound to every core:
        # nothing is left beside it for the rule to share out (such a layout is refused as not measurable)
        return None
    server = server_cores_left(cpu)
    return round(max((1 - limits.engine_core_fraction) * len(cpu["cores_left"]) - server, server), 3)


def cpu_share_reason(cpu: Mapping[str, Any] | None, limits: ValidityLimits) -> str | None:
    """"client-bound here" when the load generator alone used more cores than the rule allows (``details.cpu``)."""
    limit = cpu_share_limit(cpu, limits) if cpu else None
    if cpu is None or limit is None:
        return None
    client_cores = cpu["client_cpu_s"] / cpu["wall_s"]
    if client_cores <= limit:
        return None
    return (f"client-bound here: the load generator used {client_cores:.2f} cores ({cpu['client_cpu_s']:.1f} s of "
            f"CPU over {cpu['wall_s']:.1f} s) > {limit:.2f}: with the server's {server_cores_left(cpu):.2f} there it "
            f"filled the {len(cpu['cores_left'])} core(s) left to them past {1 - limits.engine_core_fraction:.0%} "
            "and took most of it, so the server's API and scheduler queued behind it")


def invalid_reasons(records: Sequence[RequestRecord], health: ClientHealth, limits: ValidityLimits, *,
                    timed: bool, ignore_eos: bool, expected: int, cpu: Mapping[str, Any] | None = None) -> list[str]:
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
    if (cpu_reason := cpu_share_reason(cpu, limits)) is not None:
        reasons.append(cpu_reason)
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
                      "passed": agree == len(compared),
                      "reference": f"{len(compared)} reference outputs, exact text match"}
    return out
