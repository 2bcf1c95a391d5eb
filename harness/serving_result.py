"""Assemble a serving run's result document from its records, client stats and server metrics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import fingerprint
from harness.client import RequestRecord
from harness.client.loop import loop_name
from harness.client.pool import ClientRun
from harness.contract import (
    Conclusion,
    Correctness,
    Failure,
    Identity,
    Performance,
    WorkloadInfo,
    build_result,
)
from harness.metrics import output_tokens, performance
from harness.validity import (
    ClientHealth,
    correctness,
    invalid_reasons,
    schedule_reasons,
    schedule_stats,
)
from harness.workload import Workload

if TYPE_CHECKING:
    from harness.serving import MeasureConfig

RESULT_ARRIVAL_KEYS = ("process", "rate_rps", "burstiness")


@dataclass(frozen=True)
class ResultInputs:
    workload: Workload
    records: list[RequestRecord]
    run: ClientRun
    server_metrics: dict[str, Any]
    closed_concurrency: int | None
    max_concurrency: int | None
    peak_memory_bytes: int | None
    failure: Failure | None
    references: dict[int, str] | None
    run_id: str
    requested: dict[str, Any]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _workload_info(w: Workload, inputs: ResultInputs) -> WorkloadInfo:
    h = w.header
    concurrency = inputs.closed_concurrency or inputs.max_concurrency
    info = WorkloadInfo(
        request_count=h["request_count"], input_tokens=h["token_counts"]["input"], output_tokens=h["token_counts"]["output"],
        arrival={k: h["arrival"][k] for k in RESULT_ARRIVAL_KEYS if h["arrival"].get(k) is not None},
        concurrency=concurrency, seed=h["generator"].get("seed", h["seeds"].get("lengths", 0)), kind=h["kind"],
        seeds=dict(h["seeds"]),
    )
    if concurrency is None:
        info.null_reasons["concurrency"] = "timed schedule without a cap on in-flight requests"
    return info


def _health(run: ClientRun) -> ClientHealth:
    lags = [s.loop_lag_p99_ms for s in run.stats if s.loop_lag_p99_ms is not None]
    maxes = [s.loop_lag_max_ms for s in run.stats if s.loop_lag_max_ms is not None]
    return ClientHealth(loop_lag_p99_ms=max(lags) if lags else None, loop_lag_max_ms=max(maxes) if maxes else None,
                        workers=run.workers, interrupted=run.interrupted)


def _performance(cfg: MeasureConfig, inputs: ResultInputs) -> Performance:
    group = performance(inputs.records, cfg.slo)
    reasons = group.pop("null_reasons")
    perf = Performance(**group, null_reasons=reasons)
    queue = inputs.server_metrics.get("queue_time_ms")
    if queue and queue["distribution"]:
        perf.queue_wait_server_ms = queue["distribution"]
    elif queue:
        perf.null_reasons["queue_wait_server_ms"] = f"{queue['series']}: {queue['unresolved']}"
    else:
        perf.null_reasons["queue_wait_server_ms"] = inputs.server_metrics["absent"].get("queue_time_ms", "not measured")
    if inputs.peak_memory_bytes is not None:
        perf.peak_memory_bytes = int(inputs.peak_memory_bytes)
        perf.peak_memory_source = cfg.memory_source
    else:
        perf.null_reasons["peak_memory_bytes"] = "no memory probe given" if cfg.memory_probe is None else "the memory probe returned nothing"
    return perf


def _conclusion(failure: Failure | None, reasons: list[str], summary: str) -> Conclusion:
    if failure is not None:
        next_step = "read the failure message (and the server log tail), fix the cause and rerun"
    elif reasons:
        next_step = "fix each invalid reason (client bottleneck: more client workers or less load) and rerun"
    else:
        next_step = "repeat the run (>= 3) or pair it against the other arm"
    return Conclusion(evidence_level="single", decision="blocked" if failure else "inconclusive", next_step=next_step,
                      failure=failure, valid=not reasons, invalid_reasons=reasons, repeats=1, summary=summary)


def build_serving_result(cfg: MeasureConfig, inputs: ResultInputs) -> dict[str, Any]:
    w, records = inputs.workload, inputs.records
    timed = inputs.closed_concurrency is None
    health = _health(inputs.run)
    reasons = invalid_reasons(records, health, cfg.validity, timed=timed, ignore_eos=cfg.ignore_eos, expected=len(w.requests))
    if inputs.failure is not None and not reasons:
        reasons = [f"{inputs.failure.kind}: {inputs.failure.message}"]
    tok = cfg.tokenizer_ref or {"name": w.header["tokenizer"]["name"], "version": w.header["tokenizer"]["sha256"]}
    identity = Identity(semantic_id=cfg.semantic_id, workload_id=w.workload_id, run_label=cfg.run_label,
                        run_id=inputs.run_id, model=cfg.model_ref, tokenizer=tok)
    if cfg.model_ref is None:
        identity.null_reasons["model"] = f"served model {cfg.model!r}: no model version given"
    perf = _performance(cfg, inputs)
    corr = correctness(records, inputs.references)
    corr_reasons = corr.pop("null_reasons")
    usage_missing = sum(1 for r in records if r.completed and r.completion_tokens is None)
    done = sum(r.completed for r in records)
    ttft = perf.ttft_ms["p50"] if perf.ttft_ms else None
    summary = f"{done}/{len(records)} requests completed" + (f"; TTFT P50 {ttft:.1f} ms" if ttft is not None else "") + \
        ("; VALID" if not reasons else f"; INVALID ({len(reasons)} reasons)")
    details = {
        "server_metrics": inputs.server_metrics,
        "client": {
            "workers": inputs.run.workers, "event_loop": loop_name(), "loop_lag_p99_ms": health.loop_lag_p99_ms, "loop_lag_max_ms": health.loop_lag_max_ms,
            **schedule_stats(records, timed=timed),
            "schedule_reasons": schedule_reasons(records, health, cfg.validity, timed=timed), "api": cfg.api, "ignore_eos": cfg.ignore_eos, "min_tokens": cfg.min_tokens,
        },
        "usage": {"completed": done, "without_server_usage": usage_missing,
                  "note": ("output tokens of requests without server usage were counted from content chunks"
                           if usage_missing else "output tokens from the server's usage"),
                  "output_tokens_counted": sum(output_tokens(r) for r in records if r.completed)},
        "validity_limits": cfg.validity.to_dict(),
        "requested": _jsonable(inputs.requested),
        **_jsonable(dict(cfg.extra_details)),
    }
    return build_result(
        kind="serving", identity=identity, workload=_workload_info(w, inputs),
        environment=fingerprint.environment_group(cfg.profile_id, cfg.backend_name, cfg.backend_version, runtime=cfg.runtime,
                                                  image=cfg.image, backend_command=list(cfg.backend_command or []) or None),
        performance=perf, correctness=Correctness(**corr, null_reasons=corr_reasons),
        conclusion=_conclusion(inputs.failure, reasons, summary), details=details,
    )
