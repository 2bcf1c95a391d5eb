"""One measured arm run against a live server, and the server-crash rule.

The measurement itself (client, records, metrics, result.json) is
``harness.serving.measure``; this module points it at the arm's workload and
output directory and, when the server died during the arm, turns the arm's
result into a failed one: ``failure.kind = server_crash`` with the log tail,
every completed request kept, decision blocked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.client import RequestRecord
from harness.contract import Failure, write_result
from harness.experiments.paired import ArmRun
from harness.experiments.server_session import ServerSession
from harness.models import PreparedModel
from harness.serving import MeasureConfig, MeasureOutcome, measure
from harness.telemetry.prometheus import parse

Progress = Callable[[str], None]
PROFILE_ID = {"vllm-cpu": "INF-VLLM-CPU", "vllm": "INF-VLLM-011-CU128", "sglang": "INF-SGLANG"}


@dataclass(frozen=True)
class Workload:
    path: Path
    workload_id: str


@dataclass(frozen=True)
class ArmContext:
    """What every arm run of one bench shares."""

    semantic_id: str
    run_id: str
    run_dir: Path
    model: PreparedModel
    workloads: dict[str, Workload]  # by workload kind: shared-prefix, unique-prefix, warmup
    concurrency: int
    request_timeout_s: float
    runtime: str = "local"


def arm_dir(run_dir: Path, label: str, repeat: int) -> Path:
    return run_dir / "arms" / label.replace("/", ".") / f"r{repeat}"


def measure_config(ctx: ArmContext, srv: ServerSession, workload: Workload, out_dir: Path, label: str) -> MeasureConfig:
    token_budget = {"max_num_batched_tokens": srv.config.max_num_batched_tokens, "max_num_seqs": srv.config.max_num_seqs}
    return MeasureConfig(
        endpoint=srv.base_url, model=srv.config.served_model_name, workload_path=workload.path, out_dir=out_dir,
        api="completions", max_concurrency=ctx.concurrency, timeout_s=ctx.request_timeout_s,
        semantic_id=ctx.semantic_id, run_label=label, run_id=ctx.run_id,
        profile_id=PROFILE_ID.get(srv.backend.name, "INF-VLLM-CPU"), backend_name=srv.backend.name,
        backend_version=srv.backend.version(), backend_command=tuple(srv.command), runtime=ctx.runtime,
        model_ref=ctx.model.model_ref, tokenizer_ref=ctx.model.tokenizer_ref, metrics_url=srv.metrics_url,
        memory_probe=srv.handle.memory_bytes, ignore_eos=True, token_budget=token_budget,
        failure_refiner=lambda failure: crash_failure(srv, label, failure),
        extra_details={"server": srv.name, "prefix_caching": srv.config.prefix_caching},
    )


def crash_failure(srv: ServerSession, label: str, failure: Failure) -> Failure:
    """The measurement saw the endpoint go away: name the server and attach its log tail."""
    status = None if srv.handle.alive() else "exited"
    message = f"server {srv.name} {status or 'stopped answering'} during arm {label}: {failure.message}"
    return Failure(stage=failure.stage, kind="server_crash", message=message, recovered=False,
                   log_tail=srv.handle.log_tail(30))


def _measure(ctx: ArmContext, srv: ServerSession, workload: Workload, out_dir: Path, label: str) -> MeasureOutcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    return measure(measure_config(ctx, srv, workload, out_dir, label))


def warm_up(ctx: ArmContext, srv: ServerSession, progress: Progress) -> None:
    """Unmeasured requests after each server start (first-request costs), then an empty prefix cache."""
    progress(f"server {srv.name}: warm-up")
    _measure(ctx, srv, ctx.workloads["warmup"], ctx.run_dir / "warmup" / srv.name, f"warmup/{srv.name}")
    srv.reset_prefix_cache()


def ttft_samples_ms(records: Sequence[RequestRecord]) -> list[float]:
    """TTFT (sent → first content chunk) of every completed request, in workload order."""
    return [(r.first_token_s - r.sent_s) * 1000.0 for r in records
            if r.completed and r.first_token_s is not None and r.sent_s is not None]


def hit_rate_of(result: dict[str, Any]) -> float | None:
    """Prefix-cache hit rate of the run: counter deltas as the measurement recorded them."""
    prefix = ((result.get("details") or {}).get("server_metrics") or {}).get("prefix_cache") or {}
    value = prefix.get("hit_rate")
    return float(value) if isinstance(value, (int, float)) else None


def kv_cache_config(metrics_path: Path) -> dict[str, Any] | None:
    """KV-cache capacity as the engine reports it (vLLM's ``cache_config_info`` labels), or None."""
    if not metrics_path.is_file():
        return None
    snap = parse(metrics_path.read_text())
    for (name, labels), _ in snap.samples.items():
        if name == "vllm:cache_config_info":
            info = dict(labels)
            picked = {}
            for key in ("kv_cache_size_tokens", "block_size", "num_gpu_blocks", "kv_cache_memory_bytes"):
                try:
                    picked[key] = int(info[key])
                except (KeyError, ValueError):
                    continue
            picked["enable_prefix_caching"] = info.get("enable_prefix_caching") == "True"
            return picked
    return None


def mark_server_crash(result: dict[str, Any], srv: ServerSession, label: str, repeat: int) -> dict[str, Any]:
    """The arm result of a run the server did not survive, when the measurement did not already say so."""
    failure = (result["conclusion"].get("failure") or {})
    if failure.get("kind") == "server_crash":
        return result
    conclusion = dict(result["conclusion"])
    message = f"server {srv.name} exited during arm {label} repeat {repeat}"
    conclusion.update(
        failure={"stage": "run", "kind": "server_crash", "message": message, "recovered": False,
                 "log_tail": srv.handle.log_tail(30)},
        evidence_level="single", decision="blocked", valid=False,
        invalid_reasons=[*conclusion.get("invalid_reasons", []), "server crashed during the run"],
    )
    return {**result, "conclusion": conclusion}


def run_arm(ctx: ArmContext, srv: ServerSession, label: str, repeat: int) -> ArmRun:
    out = arm_dir(ctx.run_dir, label, repeat)
    outcome = _measure(ctx, srv, ctx.workloads[label.split("/")[0]], out, label)
    result = outcome.result
    if not srv.handle.alive():
        result = mark_server_crash(result, srv, label, repeat)
        write_result(outcome.result_path, result)
    return ArmRun(label=label, repeat=repeat, result_path=outcome.result_path, result=result,
                  samples_ms=tuple(ttft_samples_ms(outcome.records)), hit_rate=hit_rate_of(result), server=srv.name)
