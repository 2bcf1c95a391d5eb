"""Server-side evidence from two ``/metrics`` snapshots (before/after the run) and polled gauge peaks.

vLLM and SGLang name the same quantities differently; each quantity lists its series
per backend in one table, first match wins. Every quantity is a delta across the run
(counters, histograms) or a peak during it (gauges). A series missing from a snapshot
is reported under ``absent`` with the reason — never as zero. A counter that went
down (server restarted) is absent too.
"""

from __future__ import annotations

from typing import Any

from harness.telemetry.prometheus import Snapshot

# quantity -> candidate series, in order (vLLM v1 names first, then older vLLM, then SGLang)
PREFIX_CACHE = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
)
QUEUE_HISTOGRAMS = ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds")
PREEMPTIONS = ("vllm:num_preemptions_total",)
KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING_GAUGES = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
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
POLLED_GAUGES = KV_USAGE_GAUGES + RUNNING_GAUGES + WAITING_GAUGES


def counter_delta(before: Snapshot, after: Snapshot, name: str) -> tuple[float | None, str | None]:
    """(delta, None) or (None, why it is absent)."""
    a, b = before.total(name), after.total(name)
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
        out["unresolved"] = (f"all {out['n']} observations are below the smallest bucket bound ({first * 1e3:g} ms); "
                             f"mean {out['mean_ms']} ms")
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


def _first_present(snap: Snapshot, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if snap.total(n) is not None), None)


def summarize(before: Snapshot | None, after: Snapshot | None, peaks: dict[str, float] | None = None) -> dict[str, Any]:
    """``details.server_metrics``: deltas and peaks, with ``absent`` naming what could not be measured and why."""
    peaks = peaks or {}
    out: dict[str, Any] = {"prefix_cache": None, "queue_time_ms": None, "preemptions": None,
                           "kv_cache_usage_peak": None, "running_peak": None, "waiting_peak": None,
                           "tokens": {}, "spec_decode": None, "absent": {}}
    absent = out["absent"]
    for name, gauges in (("kv_cache_usage_peak", KV_USAGE_GAUGES), ("running_peak", RUNNING_GAUGES), ("waiting_peak", WAITING_GAUGES)):
        polled = [peaks[g] for g in gauges if g in peaks]
        ends = [s.total(g) for s in (before, after) if s is not None for g in gauges if s.total(g) is not None]
        if polled or ends:
            out[name] = max(polled + ends)
        else:
            absent[name] = f"none of {', '.join(gauges)} seen while polling /metrics"
    if before is None or after is None:
        why = "no /metrics snapshot " + ("before" if before is None else "after") + " the run"
        for key in ("prefix_cache", "queue_time_ms", "preemptions", "tokens", "spec_decode"):
            absent[key] = why
        return out
    for hits, queries in PREFIX_CACHE:
        if before.total(hits) is None and after.total(hits) is None:
            continue
        dh, why_h = counter_delta(before, after, hits)
        dq, why_q = counter_delta(before, after, queries)
        if why_h or why_q:
            absent["prefix_cache"] = why_h or why_q
        else:
            out["prefix_cache"] = {"hits": dh, "queries": dq, "hit_rate": round(dh / dq, 6) if dq else None,
                                   "series": [hits, queries]}
        break
    else:
        absent["prefix_cache"] = "no prefix-cache counters (" + ", ".join(h for h, _ in PREFIX_CACHE) + ")"
    queue_name = _first_present(after, tuple(f"{h}_sum" for h in QUEUE_HISTOGRAMS))
    if queue_name:
        observed, why = histogram_delta_ms(before, after, queue_name.removesuffix("_sum"))
        if observed:
            out["queue_time_ms"] = {**observed, "series": queue_name.removesuffix("_sum"),
                                    "percentiles": "estimated from histogram buckets (Prometheus histogram_quantile)"}
        if why:
            absent["queue_time_ms"] = why
    else:
        absent["queue_time_ms"] = "no queue-time histogram (" + ", ".join(QUEUE_HISTOGRAMS) + ")"
    preempt = _first_present(after, PREEMPTIONS)
    if preempt:
        out["preemptions"], why = counter_delta(before, after, preempt)
        if why:
            absent["preemptions"] = why
    else:
        absent["preemptions"] = "no preemption counter (" + ", ".join(PREEMPTIONS) + ")"
    for key, names in TOKEN_COUNTERS.items():
        name = _first_present(after, names)
        if name:
            out["tokens"][key], why = counter_delta(before, after, name)
            if why:
                absent[f"tokens.{key}"] = why
        else:
            absent[f"tokens.{key}"] = "no counter (" + ", ".join(names) + ")"
    if after.total(SPEC_DECODE["drafts"]) is not None:
        spec = {k: counter_delta(before, after, n)[0] for k, n in SPEC_DECODE.items()}
        if spec["draft_tokens"]:
            spec["acceptance_rate"] = round(spec["accepted_tokens"] / spec["draft_tokens"], 6) if spec["accepted_tokens"] is not None else None
        if spec["drafts"]:
            spec["mean_acceptance_length"] = round(1 + spec["accepted_tokens"] / spec["drafts"], 6) if spec["accepted_tokens"] is not None else None
        spec["accepted_tokens_per_position"] = per_position_delta(before, after)
        if spec["accepted_tokens_per_position"] is None:
            absent["spec_decode.accepted_tokens_per_position"] = f"{SPEC_DECODE_PER_POSITION} not exported"
        out["spec_decode"] = spec
    else:
        absent["spec_decode"] = "no speculative-decoding counters (not enabled or not exported)"
    return out
