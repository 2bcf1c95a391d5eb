"""Assemble a serving run's result document from its records, client stats and server metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client import RequestRecord
from harness.client.loop import loop_name
from harness.client.pool import ClientRun
from harness.contract import (
    Conclusion,
    Correctness,
    ExcludedWork,
    Failure,
    Identity,
    Performance,
    WorkloadInfo,
    build_result,
)
from harness.rundir import fingerprint
from harness.serving.energy import EnergyInputs, device_memory_group, energy_group, gpu_telemetry_group
from harness.serving.metrics import TokenEnds, output_tokens, performance
from harness.serving.stalls import Stall, excluded_names
from harness.serving.turns import session_details
from harness.serving.validity import (
    ClientHealth,
    ValidityLimits,
    correctness,
    cpu_share_reason,
    invalid_reasons,
    schedule_reasons,
    schedule_stats,
    stall_record,
)
from harness.telemetry.gpu_sampler import gpu_reasons
from harness.workload import Workload

RESULT_ARRIVAL_KEYS = ("process", "rate_rps", "burstiness")


@dataclass(frozen=True)
class RunFacts:
    """What a serving result states about its run besides the measurements: the identity and environment
    it records, the client settings, and the limits the run is held to."""

    semantic_id: str
    run_label: str
    run_id: str
    served_model: str
    model_ref: Mapping[str, str] | None
    tokenizer_ref: Mapping[str, str] | None
    profile_id: str
    backend_name: str
    backend_version: str
    backend_command: tuple[str, ...] | None
    runtime: str
    image: Mapping[str, Any] | None
    api: str
    ignore_eos: bool
    min_tokens: bool
    slo: Mapping[str, float]
    validity: ValidityLimits
    token_budget: Mapping[str, int | None] | None
    memory_source: str
    memory_probed: bool
    requested: Mapping[str, Any]
    extra_details: Mapping[str, Any] = field(default_factory=dict)
    batch_barrier: bool = False
    stream: bool = True
    token_ends: TokenEnds | None = None  # a tokenizer for per-chunk token counts the server did not send


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
    cpu: dict[str, Any] | None = None  # details.cpu (harness.serving.cpushare): the client/server CPU split
    energy: EnergyInputs | None = None  # what the GPU sampler / RAPL read during the run


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _workload_info(w: Workload, inputs: ResultInputs, facts: RunFacts) -> WorkloadInfo:
    h = w.header
    concurrency = inputs.closed_concurrency or inputs.max_concurrency
    budget = {"max_num_batched_tokens": None, "max_num_seqs": None, **(facts.token_budget or {})}
    info = WorkloadInfo(
        request_count=h["request_count"],
        input_tokens=h["token_counts"]["input"],
        output_tokens=h["token_counts"]["output"],
        arrival={k: h["arrival"][k] for k in RESULT_ARRIVAL_KEYS if h["arrival"].get(k) is not None},
        concurrency=concurrency,
        seed=h["generator"].get("seed", h["seeds"].get("lengths", 0)),
        kind=h["kind"],
        seeds=dict(h["seeds"]),
        token_budget=budget,
    )
    if concurrency is None:
        info.null_reasons["concurrency"] = "timed schedule without a cap on in-flight requests"
    return info


def _health(run: ClientRun) -> ClientHealth:
    lags = [s.loop_lag_p99_ms for s in run.stats if s.loop_lag_p99_ms is not None]
    maxes = [s.loop_lag_max_ms for s in run.stats if s.loop_lag_max_ms is not None]
    samples = [s.lag_samples for s in run.stats]
    kept = run.stats and all(s.stalls is not None and not s.stalls_dropped for s in run.stats)
    return ClientHealth(
        stalls=tuple(Stall(s.worker, a, b) for s in run.stats for a, b in s.stalls or ()) if kept else None,
        loop_lag_p99_ms=max(lags) if lags else None,
        loop_lag_max_ms=max(maxes) if maxes else None,
        workers=run.workers,
        interrupted=run.interrupted,
        lag_samples=min(samples) if samples else None,
    )


def _performance(facts: RunFacts, inputs: ResultInputs) -> Performance:
    group = performance(inputs.records, facts.slo, streamed=facts.stream, token_ends=facts.token_ends)
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
        perf.peak_memory_source = facts.memory_source
    else:
        perf.null_reasons["peak_memory_bytes"] = (
            "no memory probe given" if not facts.memory_probed else "the memory probe returned nothing"
        )
    _energy(perf, inputs)
    return perf


def _energy(perf: Performance, inputs: ResultInputs) -> None:
    """The energy, device-memory and GPU-telemetry groups (each null with its reason where not measured)."""
    energy = inputs.energy or EnergyInputs(gpu=None, rapl=None, idle=None, usd_per_gpu_hour=None)
    tokens = sum(output_tokens(r) for r in inputs.records if r.completed)
    done = sum(r.completed for r in inputs.records)
    perf.energy, why = energy_group(energy, output_tokens=tokens, requests=done)
    if perf.energy is None:
        perf.null_reasons["energy"] = why
    perf.device_memory, why = device_memory_group(energy)
    if perf.device_memory is None:
        perf.null_reasons["device_memory"] = why
    perf.gpu_telemetry = gpu_telemetry_group(energy)


def excluded_work(stalls: dict[str, Any] | None) -> ExcludedWork | None:
    """The conclusion's ``excluded_work`` of one run: each request whose figures a stall or late send moved, named."""
    names = excluded_names(stalls)
    if not names:
        return None
    return ExcludedWork(count=len(names), requests=names,
                        consequence="left out of the figures a client stall (or their own late send) could move, "
                                    "each named with the timestamp it held; the run is judged on the rest "
                                    "(details.client.stalls)")


def _conclusion(failure: Failure | None, reasons: list[str], summary: str) -> Conclusion:
    if failure is not None:
        next_step = "read the failure message (and the server log tail), fix the cause and rerun"
    elif reasons:
        next_step = "fix each invalid reason (client bottleneck: more client workers or less load) and rerun"
    else:
        next_step = "repeat the run (>= 3) or pair it against the other arm"
    return Conclusion(
        evidence_level="single",
        decision="blocked" if failure else "inconclusive",
        next_step=next_step,
        failure=failure,
        valid=not reasons,
        invalid_reasons=reasons,
        repeats=1,
        summary=summary,
    )


def _client_details(facts: RunFacts, inputs: ResultInputs, health: ClientHealth, *, timed: bool) -> dict[str, Any]:
    """``details.client``: the client's processes, loop lag, schedule keeping and request settings."""
    kept = schedule_reasons(inputs.records, health, facts.validity, timed=timed)
    stalls = stall_record(inputs.records, health, facts.validity, timed=timed)
    return {
        "workers": inputs.run.workers,
        "event_loop": loop_name(),
        "loop_lag_p99_ms": health.loop_lag_p99_ms,
        "loop_lag_max_ms": health.loop_lag_max_ms,
        **schedule_stats(inputs.records, timed=timed),
        "api": facts.api,
        "ignore_eos": facts.ignore_eos,
        "min_tokens": facts.min_tokens,
        "batch_barrier": facts.batch_barrier,
        "stream": facts.stream,
        "schedule_reasons": kept,
        "stalls": stalls or {"recorded": False, "why": "the client did not keep its loop's excursions (or kept too "
                                                      "many): stalls are judged by the loop-lag P99 over the run"},
        # what makes the run describe the client rather than the server: a schedule it did not keep, or the CPU
        # it took from the engine
        "client_reasons": [*kept, *filter(None, [cpu_share_reason(inputs.cpu, facts.validity)])],
    }


def _usage_details(records: list[RequestRecord], done: int) -> dict[str, Any]:
    """``details.usage``: where output token counts came from, and the server data that was rejected."""
    usage_missing = sum(1 for r in records if r.completed and r.completion_tokens is None)
    rejected = [r for r in records if r.server_data_error]
    return {
        "completed": done,
        "without_server_usage": usage_missing,
        "note": (
            "output tokens of requests without server usage were counted from content chunks"
            if usage_missing
            else "output tokens from the server's usage"
        ),
        "output_tokens_counted": sum(output_tokens(r) for r in records if r.completed),
        # server-reported values that were not sane were recorded as absent; requests.jsonl says why
        "server_data_rejected": len(rejected),
        "server_data_first_rejection": rejected[0].server_data_error if rejected else None,
    }


def _reasons(facts: RunFacts, inputs: ResultInputs, health: ClientHealth, *, timed: bool) -> list[str]:
    """Every reason the run is invalid: the client's, the requests', a shared or throttled GPU's, or the failure."""
    reasons = invalid_reasons(
        inputs.records, health, facts.validity, timed=timed, ignore_eos=facts.ignore_eos,
        expected=len(inputs.workload.requests), cpu=inputs.cpu,
    )
    if inputs.energy is not None:  # a shared or throttled GPU measures the machine, not the engine
        reasons += gpu_reasons(inputs.energy.gpu, inputs.energy.idle)
    if inputs.failure is not None and not reasons:
        reasons = [f"{inputs.failure.kind}: {inputs.failure.message}"]
    return reasons


def build_serving_result(facts: RunFacts, inputs: ResultInputs) -> dict[str, Any]:
    w, records = inputs.workload, inputs.records
    timed = inputs.closed_concurrency is None
    health = _health(inputs.run)
    reasons = _reasons(facts, inputs, health, timed=timed)
    tok = dict(
        facts.tokenizer_ref or {"name": w.header["tokenizer"]["name"], "version": w.header["tokenizer"]["sha256"]}
    )
    identity = Identity(
        semantic_id=facts.semantic_id,
        workload_id=w.workload_id,
        run_label=facts.run_label,
        run_id=facts.run_id,
        model=dict(facts.model_ref) if facts.model_ref else None,
        tokenizer=tok,
    )
    if facts.model_ref is None:
        identity.null_reasons["model"] = f"served model {facts.served_model!r}: no model version given"
    perf = _performance(facts, inputs)
    corr = correctness(records, inputs.references)
    corr_reasons = corr.pop("null_reasons")
    done = sum(r.completed for r in records)
    ttft = perf.ttft_ms["p50"] if perf.ttft_ms else None
    summary = (
        f"{done}/{len(records)} requests completed"
        + (f"; TTFT P50 {ttft:.1f} ms" if ttft is not None else "")
        + ("; VALID" if not reasons else f"; INVALID ({len(reasons)} reasons)")
    )
    details = {
        "server_metrics": inputs.server_metrics,
        "client": _client_details(facts, inputs, health, timed=timed),
        "usage": _usage_details(records, done),
        "cpu": inputs.cpu or {"measured": False, "why": "the CPU time was not read"},
        **({"sessions": turns} if (turns := session_details(records)) is not None else {}),
        "validity_limits": facts.validity.to_dict(),
        "requested": _jsonable(dict(facts.requested)),
        **_jsonable(dict(facts.extra_details)),
    }
    conclusion = _conclusion(inputs.failure, reasons, summary)
    conclusion.excluded_work = excluded_work(details["client"]["stalls"])
    if conclusion.excluded_work is not None:
        conclusion.summary = (f"{summary}; {conclusion.excluded_work.count} request(s) a client stall held "
                              "left out of the figures it could move")
    return build_result(
        kind="serving",
        identity=identity,
        workload=_workload_info(w, inputs, facts),
        environment=fingerprint.environment_group(
            facts.profile_id,
            facts.backend_name,
            facts.backend_version,
            runtime=facts.runtime,
            image=dict(facts.image) if facts.image else None,
            backend_command=list(facts.backend_command or []) or None,
        ),
        performance=perf,
        correctness=Correctness(**corr, null_reasons=corr_reasons),
        conclusion=conclusion,
        details=details,
    )
