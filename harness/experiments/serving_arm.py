"""One measured arm run against a live server, and the server-crash rule.

The measurement itself (client, records, metrics, result.json) is
``harness.serving.measure``; this module points it at the arm's workload and
output directory and, when the server died during the arm, turns the arm's
result into a failed one: ``failure.kind = server_crash`` with the log tail,
every completed request kept, decision blocked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract import write_result
from harness.errors import InfkitError
from harness.experiments.paired import ArmRun
from harness.experiments.server_session import ServerSession
from harness.models import PreparedModel

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


def arm_dir(run_dir: Path, label: str, repeat: int) -> Path:
    return run_dir / "arms" / label.replace("/", ".") / f"r{repeat}"


def measure_config(ctx: ArmContext, srv: ServerSession, workload: Workload, out_dir: Path, label: str):
    from harness.serving import MeasureConfig

    return MeasureConfig(
        endpoint=srv.base_url, model=srv.config.served_model_name, workload_path=workload.path, out_dir=out_dir,
        api="completions", max_concurrency=ctx.concurrency, timeout_s=ctx.request_timeout_s,
        semantic_id=ctx.semantic_id, run_label=label, run_id=ctx.run_id,
        profile_id=PROFILE_ID.get(srv.backend.name, "INF-VLLM-CPU"), backend_name=srv.backend.name,
        backend_version=srv.backend.version(), model_ref=ctx.model.model_ref, tokenizer_ref=ctx.model.tokenizer_ref,
        metrics_url=srv.metrics_url, memory_probe=srv.handle.memory_bytes, ignore_eos=True,
    )


def _measure(ctx: ArmContext, srv: ServerSession, workload: Workload, out_dir: Path, label: str) -> None:
    from harness.serving import measure

    out_dir.mkdir(parents=True, exist_ok=True)
    measure(measure_config(ctx, srv, workload, out_dir, label))


def warm_up(ctx: ArmContext, srv: ServerSession, progress: Progress) -> None:
    """Unmeasured requests after each server start (first-request costs), then an empty prefix cache."""
    progress(f"server {srv.name}: warm-up")
    _measure(ctx, srv, ctx.workloads["warmup"], ctx.run_dir / "warmup" / srv.name, f"warmup/{srv.name}")
    srv.reset_prefix_cache()


def ttft_samples_ms(requests_path: Path) -> list[float]:
    """TTFT of every request that produced output, from the per-request records."""
    out = []
    if not requests_path.exists():
        return out
    for line in requests_path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        ttft = rec.get("ttft_ms")
        if ttft is None and rec.get("first_token_s") is not None and rec.get("sent_s") is not None:
            ttft = (rec["first_token_s"] - rec["sent_s"]) * 1000.0
        if ttft is not None and not rec.get("error"):
            out.append(float(ttft))
    return out


def hit_rate_of(result: dict[str, Any]) -> float | None:
    server = (result.get("details") or {}).get("server_metrics") or {}
    value = server.get("prefix_cache_hit_rate")
    return float(value) if isinstance(value, (int, float)) else None


def mark_server_crash(result: dict[str, Any], srv: ServerSession, label: str, repeat: int) -> dict[str, Any]:
    """The arm result of a run the server did not survive."""
    status = srv.handle.stop()
    srv.exit_status = status
    conclusion = dict(result["conclusion"])
    message = f"server {srv.name} exited (status {status}) during arm {label} repeat {repeat}"
    conclusion.update(
        failure={"stage": "run", "kind": "server_crash", "message": message, "recovered": False,
                 "log_tail": srv.handle.log_tail(30)},
        evidence_level="single", decision="blocked", valid=False,
        invalid_reasons=[*conclusion.get("invalid_reasons", []), "server crashed during the run"],
        next_step=f"read {srv.handle.log_path.name} in the run directory; rerun the bench",
    )
    conclusion.pop("effect", None)
    return {**result, "conclusion": conclusion}


def run_arm(ctx: ArmContext, srv: ServerSession, label: str, repeat: int) -> ArmRun:
    out = arm_dir(ctx.run_dir, label, repeat)
    workload = ctx.workloads[label.split("/")[0]]
    error: InfkitError | None = None
    try:
        _measure(ctx, srv, workload, out, label)
    except InfkitError as exc:  # a dead server can surface as a client error
        error = exc
    if srv.handle.alive() and error is not None:
        raise error
    result_path = out / "result.json"
    result = json.loads(result_path.read_text())
    if not srv.handle.alive():
        result = mark_server_crash(result, srv, label, repeat)
        write_result(result_path, result)
    return ArmRun(label=label, repeat=repeat, result_path=result_path, result=result,
                  samples_ms=tuple(ttft_samples_ms(out / "requests.jsonl")), hit_rate=hit_rate_of(result),
                  server=srv.name)
