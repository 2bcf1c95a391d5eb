"""Pure reductions of simulated request records into the result's performance and correctness groups."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.contract import Correctness, Performance
from harness.contract.distribution import distribution_ms
from harness.mech.engine.types import EngineRun, SimRequestRecord

SIMULATED = "simulated ms from the step-cost model"


def _ms(values: list[float | None]) -> dict[str, float] | None:
    return distribution_ms([1000 * v for v in values if v is not None])


def summarize(run: EngineRun) -> dict[str, Any]:
    """Latency distributions (ms), throughput, occupancy and counts of one simulated run."""
    recs: list[SimRequestRecord] = run.records
    done = [r for r in recs if r.first_token_s is not None]
    out_tokens = sum(r.output_tokens for r in recs)
    in_tokens = sum(r.input_tokens for r in done)
    duration = max((r.finish_s for r in recs), default=0.0) - min((r.arrival_s for r in recs), default=0.0)
    return {
        "ttft_ms": _ms([r.ttft_s for r in recs]),
        "tpot_ms": _ms([r.tpot_s for r in recs]),
        "e2e_ms": _ms([r.e2e_s for r in done]),
        "queue_wait_ms": _ms([r.queue_wait_s for r in recs]),
        "throughput": {
            "request_rate_rps": round(len(done) / duration, 6) if duration else 0.0,
            "output_tokens_per_s": round(out_tokens / duration, 6) if duration else 0.0,
            "total_tokens_per_s": round((out_tokens + in_tokens) / duration, 6) if duration else 0.0,
            "duration_s": round(duration, 6),
        },
        "occupancy": {
            "mean_batch_when_busy": round(run.batch_seconds / run.busy_s, 6) if run.busy_s else 0.0,
            "busy_fraction": round(run.busy_s / duration, 6) if duration else 0.0,
        },
        "preemptions": run.preemptions,
        "steps": run.steps,
        "analytic_jumps": run.jumps,
        "cached_tokens": sum(r.cached_tokens for r in recs),
        "termination_counts": dict(sorted(Counter(r.reason for r in recs).items())),
    }


def performance(summary: dict[str, Any]) -> Performance:
    perf = Performance.not_applicable(
        "no simulated request reached this point", ttft_ms=summary["ttft_ms"], tpot_ms=summary["tpot_ms"],
        e2e_ms=summary["e2e_ms"], queue_wait_server_ms=summary["queue_wait_ms"], throughput=summary["throughput"])
    perf.null_reasons.update({
        "itl_ms": "the simulator emits decode steps, not streamed chunks",
        "queue_wait_client_ms": "a simulated client sends exactly on schedule",
        "peak_memory_bytes": "KV blocks are reported in details.kv; no process memory exists",
    })
    return perf


def correctness(summary: dict[str, Any], requests: int) -> Correctness:
    counts = summary["termination_counts"]
    accounted = sum(counts.values())
    return Correctness(output_count=counts.get("stop", 0) + counts.get("length", 0), termination_counts=counts,
                       quality={"metric": "every_request_accounted", "value": accounted == requests,
                                "passed": accounted == requests,
                                "reference": f"{accounted} terminations for {requests} requests"})
