"""Server-side evidence from two ``/metrics`` snapshots (before/after the run) and polled gauge peaks.

vLLM and SGLang name the same quantities differently; each quantity lists its series
per backend in one table, first match wins. Every quantity is a delta across the run
(counters, histograms), a peak during it (gauges) or the time-weighted occupancy of the
polled running/waiting gauges (``occupancy``). A series missing from a snapshot
is reported under ``absent`` with the reason — never as zero — with one exception:
a labelled counter that an engine creates on first increment (SGLang's
``sglang:cached_tokens_total`` appears with the first cache hit) reads 0 in a snapshot
where the same engine's paired counter exists. A counter that went down (server
restarted) is absent too.

Gauge peaks come from the readings taken during the run (polls and the final
snapshot), never from the snapshot before it. SGLang refreshes its scheduler gauges
only when it logs (every 40 decode steps, or 30 s when idle): a SGLang gauge whose
readings never moved from the before-run value was not refreshed, and has no peak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.telemetry.prometheus import Snapshot

# quantity -> candidate series, in order (vLLM v1 names first, then older vLLM, then SGLang)
PREFIX_CACHE = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
)
QUEUE_HISTOGRAMS = ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds")
PREEMPTIONS = ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")
# SGLang 0.5's retractions (its preemptions) are a gauge: requests retracted at the last log.
RETRACTION_GAUGE = "sglang:num_retracted_reqs"
KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING_GAUGES = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
LOGGED_GAUGES_PREFIX = "sglang:"  # refreshed only when the engine logs, not every step
TOKEN_COUNTERS = {
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
}
SPEC_DECODE = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
SPEC_DECODE_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
POLLED_GAUGES = KV_USAGE_GAUGES + RUNNING_GAUGES + WAITING_GAUGES + (RETRACTION_GAUGE,)
OCCUPANCY_GAUGES = {"running": RUNNING_GAUGES, "waiting": WAITING_GAUGES, "kv_cache_usage": KV_USAGE_GAUGES}


def occupancy_rows(series: list[tuple[float, dict[str, float]]], t0_s: float, end_s: float | None = None
                   ) -> list[dict[str, float]]:
    """Polled gauges as rows ``{t_s, running, waiting, kv_cache_usage}`` (t_s from the run's start ``t0_s``,
    both ``time.monotonic()``), kept within [0, end_s]; a gauge the server does not export is left out."""
    rows = []
    for taken_s, values in series:
        t_s = taken_s - t0_s
        if t_s < 0 or (end_s is not None and t_s > end_s):
            continue
        row = {"t_s": round(t_s, 3)}
        for key, names in OCCUPANCY_GAUGES.items():
            value = next((values[n] for n in names if n in values), None)
            if value is not None:
                row[key] = value
        rows.append(row)
    return rows


def occupancy(rows: list[dict[str, float]]) -> dict[str, Any] | None:
    """Time-weighted mean (each sample holds until the next) and peak of the running and waiting gauges."""
    rows = [r for r in rows if "running" in r]
    if len(rows) < 2:
        return None
    times = [r["t_s"] for r in rows]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    weights = [*gaps, sorted(gaps)[len(gaps) // 2]]  # the last sample holds one typical interval
    total = sum(weights)
    out: dict[str, Any] = {"samples": len(rows), "interval_s_median": round(weights[-1], 4),
                           "window_s": round(times[-1] - times[0], 3)}
    for key in ("running", "waiting"):
        values = [r.get(key, 0.0) for r in rows]
        out[f"{key}_mean"] = (
            round(sum(v * w for v, w in zip(values, weights, strict=True)) / total, 4) if total else None
        )
        out[f"{key}_peak"] = max(values)
    return out


def counter_value(snap: Snapshot, name: str, paired: str | None = None) -> float | None:
    """A counter's total; 0 for a lazily created labelled counter whose ``paired`` counter is present."""
    value = snap.total(name)
    if value is None and paired is not None and snap.total(paired) is not None:
        return 0.0
    return value


def counter_delta(
    before: Snapshot, after: Snapshot, name: str, paired: str | None = None
) -> tuple[float | None, str | None]:
    """(delta, None) or (None, why it is absent); ``paired``: see ``counter_value``."""
    a, b = counter_value(before, name, paired), counter_value(after, name, paired)
    if a is None or b is None:
        return None, f"{name} absent from /metrics {'before' if a is None else 'after'} the run"
    if b < a:
        return None, f"{name} went down ({a:g} -> {b:g}): the server restarted during the run"
    return b - a, None


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus ``histogram_quantile``: linear interpolation inside the bucket holding rank q·count."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return prev_bound  # the highest finite bound, as Prometheus does
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def histogram_delta_ms(before: Snapshot, after: Snapshot, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """The run's observations of a seconds histogram: ``{"n", "mean_ms", "distribution"}``, or (None, why).

    ``distribution`` (a ``distribution_ms``) has percentiles interpolated inside buckets as
    Prometheus' ``histogram_quantile`` does; it is None, with ``unresolved`` saying why, when
    every observation lies below the smallest bucket bound (e.g. vLLM's first queue-time
    bucket is 0.3 s): interpolating from 0 would report 150 ms for sub-millisecond waits.
    """
    b0, b1 = before.buckets(name), after.buckets(name)
    s0, s1 = before.total(f"{name}_sum"), after.total(f"{name}_sum")
    if b0 is None or b1 is None or s0 is None or s1 is None:
        return None, f"{name} absent from /metrics"
    delta = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    count = delta.get(float("inf"), max(delta.values()))
    if count < 0 or any(v < 0 for v in delta.values()):
        return None, f"{name} went down: the server restarted during the run"
    if count < 1:
        return None, f"{name} observed no request during the run"
    out: dict[str, Any] = {"n": int(round(count)), "mean_ms": round((s1 - s0) / count * 1e3, 4), "distribution": None}
    first = min(delta)
    if delta[first] >= count:
        out["unresolved"] = (
            f"all {out['n']} observations are below the smallest bucket bound ({first * 1e3:g} ms); "
            f"mean {out['mean_ms']} ms"
        )
        return out, None
    dist = {"n": out["n"], "mean": out["mean_ms"]}
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
        dist[key] = round(histogram_quantile(q, delta) * 1e3, 4)
    out["distribution"] = dist
    return out, None


def per_position_delta(before: Snapshot, after: Snapshot) -> list[float] | None:
    """Accepted tokens per draft position (0, 1, ...) across the run; None when not exported or reset."""
    a, b = before.by_label(SPEC_DECODE_PER_POSITION, "position"), after.by_label(SPEC_DECODE_PER_POSITION, "position")
    if not b or any(b.get(k, 0.0) < v for k, v in a.items()):
        return None
    return [b[k] - a.get(k, 0.0) for k in sorted(b, key=int)]


def _readings(after: Snapshot | None, polled: Mapping[str, Sequence[float]], gauge: str) -> list[float]:
    return list(polled.get(gauge, ())) + ([after.total(gauge)] if after and after.total(gauge) is not None else [])


def engine_logged(before: Snapshot | None, after: Snapshot | None, polled: Mapping[str, Sequence[float]]) -> bool:
    """Whether any log-refreshed gauge moved during the run (the engine sets them all at each log)."""
    if before is None:
        return False
    return any(
        v != before.total(g)
        for g in POLLED_GAUGES
        if g.startswith(LOGGED_GAUGES_PREFIX) and before.total(g) is not None
        for v in _readings(after, polled, g)
    )


def gauge_peak(
    before: Snapshot | None,
    after: Snapshot | None,
    polled: Mapping[str, Sequence[float]],
    gauges: tuple[str, ...],
    logged: bool = False,
) -> tuple[float | None, str | None]:
    """The highest reading during the run (polls in order, final snapshot) of the first gauge seen; or (None, why).

    A gauge refreshed only when the engine logs shows the before-run value until its first
    change; those readings are dropped. One that never changed is a real reading only if the
    engine logged during the run (``logged``: another of its gauges moved).
    """
    for g in gauges:
        during = _readings(after, polled, g)
        if not during:
            continue
        start = before.total(g) if before is not None else None
        if g.startswith(LOGGED_GAUGES_PREFIX) and start is not None:
            fresh = next((i for i, v in enumerate(during) if v != start), None)
            if fresh is None and not logged:
                return None, (
                    f"{g} kept its before-run value {start:g}: not refreshed during the run "
                    "(SGLang logs every 40 decode steps or 30 s idle)"
                )
            during = during[fresh or 0 :]
        return max(during), None
    return None, f"none of {', '.join(gauges)} seen while polling /metrics"


def _first_present(snap: Snapshot, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if snap.total(n) is not None), None)


Family = tuple[dict[str, Any], dict[str, str]]  # (fields of details.server_metrics, absent: field -> why)


def _prefix_cache(before: Snapshot, after: Snapshot) -> Family:
    for hits, queries in PREFIX_CACHE:
        if counter_value(before, hits, queries) is None and counter_value(after, hits, queries) is None:
            continue
        dh, why_h = counter_delta(before, after, hits, paired=queries)
        dq, why_q = counter_delta(before, after, queries)
        if why_h or why_q:
            return {}, {"prefix_cache": why_h or why_q or ""}
        return {
            "prefix_cache": {
                "hits": dh,
                "queries": dq,
                "hit_rate": round(dh / dq, 6) if dq else None,
                "series": [hits, queries],
            }
        }, {}
    return {}, {"prefix_cache": "no prefix-cache counters (" + ", ".join(h for h, _ in PREFIX_CACHE) + ")"}


def _queue_time(before: Snapshot, after: Snapshot) -> Family:
    queue_name = _first_present(after, tuple(f"{h}_sum" for h in QUEUE_HISTOGRAMS))
    if not queue_name:
        return {}, {"queue_time_ms": "no queue-time histogram (" + ", ".join(QUEUE_HISTOGRAMS) + ")"}
    observed, why = histogram_delta_ms(before, after, queue_name.removesuffix("_sum"))
    out = (
        {
            "queue_time_ms": {
                **observed,
                "series": queue_name.removesuffix("_sum"),
                "percentiles": "estimated from histogram buckets (Prometheus histogram_quantile)",
            }
        }
        if observed
        else {}
    )
    return out, {"queue_time_ms": why} if why else {}


def _preemptions(before: Snapshot, after: Snapshot, peaks: Mapping[str, Sequence[float]], logged: bool) -> Family:
    preempt = _first_present(after, PREEMPTIONS)
    if preempt:
        value, why = counter_delta(before, after, preempt)
        series = preempt
    elif after.total(RETRACTION_GAUGE) is not None:
        value, why = gauge_peak(before, after, peaks, (RETRACTION_GAUGE,), logged)
        series = f"{RETRACTION_GAUGE} (gauge: the most retracted at one log; a lower bound)"
    else:
        return {}, {"preemptions": "no preemption counter (" + ", ".join(PREEMPTIONS + (RETRACTION_GAUGE,)) + ")"}
    return {"preemptions": value, "preemptions_series": series}, {"preemptions": why} if why else {}


def _tokens(before: Snapshot, after: Snapshot) -> Family:
    tokens, absent = {}, {}
    for key, names in TOKEN_COUNTERS.items():
        name = _first_present(after, names)
        if name:
            tokens[key], why = counter_delta(before, after, name)
            if why:
                absent[f"tokens.{key}"] = why
        else:
            absent[f"tokens.{key}"] = "no counter (" + ", ".join(names) + ")"
    return {"tokens": tokens}, absent


def _spec_decode(before: Snapshot, after: Snapshot) -> Family:
    if after.total(SPEC_DECODE["drafts"]) is None:
        return {}, {"spec_decode": "no speculative-decoding counters (not enabled or not exported)"}
    spec = {k: counter_delta(before, after, n)[0] for k, n in SPEC_DECODE.items()}
    accepted = spec["accepted_tokens"]
    if spec["draft_tokens"]:
        spec["acceptance_rate"] = round(accepted / spec["draft_tokens"], 6) if accepted is not None else None
    if spec["drafts"]:
        spec["mean_acceptance_length"] = round(1 + accepted / spec["drafts"], 6) if accepted is not None else None
    spec["accepted_tokens_per_position"] = per_position_delta(before, after)
    absent = (
        {}
        if spec["accepted_tokens_per_position"] is not None
        else {"spec_decode.accepted_tokens_per_position": f"{SPEC_DECODE_PER_POSITION} not exported"}
    )
    return {"spec_decode": spec}, absent


def _gauges(
    before: Snapshot | None, after: Snapshot | None, peaks: Mapping[str, Sequence[float]], rows: list[dict[str, float]]
) -> Family:
    out: dict[str, Any] = {"occupancy": occupancy(rows)}
    absent: dict[str, str] = {}
    if out["occupancy"] is None:
        absent["occupancy"] = "fewer than two polls of the running gauge during the run"
    else:
        out["occupancy"]["source"] = "polled /metrics gauges (" + ", ".join(RUNNING_GAUGES + WAITING_GAUGES) + ")"
    logged = engine_logged(before, after, peaks)
    for name, gauges in (
        ("kv_cache_usage_peak", KV_USAGE_GAUGES),
        ("running_peak", RUNNING_GAUGES),
        ("waiting_peak", WAITING_GAUGES),
    ):
        out[name], why = gauge_peak(before, after, peaks, gauges, logged)
        if why:
            absent[name] = why
    return out, absent


def summarize(
    before: Snapshot | None,
    after: Snapshot | None,
    polled: Mapping[str, float | Sequence[float]] | None = None,
    occupancy_rows: list[dict[str, float]] | None = None,
) -> dict[str, Any]:
    """``details.server_metrics``: deltas, peaks and occupancy, with ``absent`` naming what could not be
    measured and why; one function per metric family.

    ``polled``: each gauge's readings during the run in order (``GaugePoller.readings``); a
    single number is taken as one reading. ``occupancy_rows``: the polled gauges over time.
    """
    peaks = {k: [v] if isinstance(v, (int, float)) else list(v) for k, v in (polled or {}).items()}
    out: dict[str, Any] = {
        "prefix_cache": None,
        "queue_time_ms": None,
        "preemptions": None,
        "kv_cache_usage_peak": None,
        "running_peak": None,
        "waiting_peak": None,
        "occupancy": None,
        "tokens": {},
        "spec_decode": None,
        "absent": {},
    }
    families = [_gauges(before, after, peaks, occupancy_rows or [])]
    if before is None or after is None:
        why = "no /metrics snapshot " + ("before" if before is None else "after") + " the run"
        families.append(
            ({}, {k: why for k in ("prefix_cache", "queue_time_ms", "preemptions", "tokens", "spec_decode")})
        )
    else:
        logged = engine_logged(before, after, peaks)
        families += [
            _prefix_cache(before, after),
            _queue_time(before, after),
            _preemptions(before, after, peaks, logged),
            _tokens(before, after),
            _spec_decode(before, after),
        ]
    for fields, absent in families:
        out.update(fields)
        out["absent"].update(absent)
    return out
