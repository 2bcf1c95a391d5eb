"""bench-69, INF-PREFIX-CACHE: does prefix caching cut TTFT when requests share a prefix?

Arms (same model, lengths, concurrency; the unique vs shared prefix paired contract):
  A  unique-prefix/cache-on   the twin workload: identical token lengths, nothing shared
  B  shared-prefix/cache-on   G groups of P prompts sharing an L-token prefix
  C  shared-prefix/cache-off  control: B's workload on a server with prefix caching off
A and B run interleaved (A B A B …) on one server; C runs on a second server
start (the engine flag needs a restart), so the C-vs-A effect is supporting,
not interleaved, evidence. The claim is B vs A; C must show no gain.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness import fingerprint as fingerprint_mod
from harness.backends import Backend, BackendConfig, get_backend
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.contract import Failure, atomic_write_json
from harness.contract.result import check_result
from harness.errors import InvalidInput
from harness.experiments.bench_outputs import BenchOutputs, write_outputs
from harness.experiments.paired import (
    ArmRun,
    Progress,
    Protocol,
    build_comparison,
    effect_of,
    interleaved,
    run_schedule,
)
from harness.experiments.server_session import ServerSession, server_session
from harness.experiments.serving_arm import ArmContext, Workload, kv_cache_config, run_arm, warm_up
from harness.ids import new_run_id
from harness.models import PreparedModel, ensure_model
from harness.runinfo import RunRecord, native_image
from harness.runtime.base import (
    ServerStartError,
    default_runtime_name,
    docker_engine_present,
    get_runtime,
    nvidia_gpu_present,
)
from harness.runtime.local import free_port
from harness.workload import Arrival, Common, make_workload, write_workload

SEMANTIC_ID = "INF-PREFIX-CACHE"
ARM_UNIQUE = "unique-prefix/cache-on"
ARM_SHARED = "shared-prefix/cache-on"
ARM_CONTROL = "shared-prefix/cache-off"


@dataclass(frozen=True)
class Bench69Config:
    """Defaults sized for ≤ 5 minutes on 2 CPU cores once the serving env and model are cached."""

    scale: int = 1  # multiplies the number of prefix groups
    repeats: int = 3
    groups: int = 2
    prompts_per_group: int = 4
    prefix_tokens: int = 1024
    suffix_tokens: int = 32
    output_tokens: int = 16
    concurrency: int = 1
    warmup_requests: int = 2
    seed: int = 0
    model: str = "smollm2-135m"
    backend: str | None = None
    runtime: str | None = None
    gpu: str | None = None
    control: bool = True
    out_root: Path = Path("runs/69")
    kv_cache_space_gib: int = 2
    max_model_len: int = 4096
    start_timeout_s: float = 900.0
    request_timeout_s: float = 120.0
    resamples: int = 10_000
    sign: bool = True

    def check(self) -> None:
        for name in ("scale", "repeats", "groups", "prompts_per_group", "prefix_tokens", "suffix_tokens",
                     "output_tokens", "concurrency"):
            if getattr(self, name) < 1:
                raise InvalidInput(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.prefix_tokens + self.suffix_tokens + self.output_tokens > self.max_model_len:
            raise InvalidInput(f"prefix + suffix + output tokens exceed max-model-len {self.max_model_len}")

    @property
    def requests_per_arm(self) -> int:
        return self.groups * self.scale * self.prompts_per_group


@dataclass(frozen=True)
class Placement:
    backend: str
    runtime: str
    notice: str | None = None


@dataclass(frozen=True)
class Bench69Outcome:
    run_dir: Path
    comparison: dict[str, Any]
    outputs: BenchOutputs
    failed: bool


def resolve_placement(cfg: Bench69Config) -> Placement:
    """GPU=N asks for the containerized vLLM path; without a GPU and an engine, say so and run the CPU default."""
    notice = None
    if cfg.gpu not in (None, ""):
        missing = [what for what, ok in (("an NVIDIA GPU", nvidia_gpu_present()),
                                         ("a Docker engine", docker_engine_present())) if not ok]
        if missing:
            notice = (f"GPU={cfg.gpu} asks for the containerized vLLM path, but this machine has no "
                      f"{' and no '.join(m.removeprefix('an ').removeprefix('a ') for m in missing)}: "
                      "running the CPU default (vllm-cpu, local runtime)")
            return Placement("vllm-cpu", "local", notice)
        return Placement(cfg.backend or "vllm", cfg.runtime or "docker")
    runtime = cfg.runtime or default_runtime_name()
    backend = cfg.backend or ("vllm" if runtime == "docker" and nvidia_gpu_present() else "vllm-cpu")
    if runtime not in get_backend(backend).runtimes:
        raise InvalidInput(f"backend {backend} does not run under runtime {runtime}",
                           hint=f"use RUNTIME={'/'.join(get_backend(backend).runtimes)}")
    return Placement(backend, runtime, notice)


NEXT_STEPS = {
    "adopt": "keep prefix caching on for shared-prefix traffic; confirm on the GPU image (make bench-69 GPU=0)",
    "reject": "prefix caching slowed TTFT here: check the hit rates and server logs before trusting it",
    "inconclusive": "raise --repeats or SCALE to narrow the interval",
    "blocked": "read the server log tail in the failed arm's result, fix the cause and rerun make bench-69",
    "aborted": "the run was interrupted: rerun make bench-69 for a decision",
}


def make_workloads(cfg: Bench69Config, model: PreparedModel, out_dir: Path, progress: Progress) -> dict[str, Workload]:
    """The shared-prefix workload, its unique-prefix twin (identical lengths) and a small warm-up set."""
    groups = cfg.groups * cfg.scale
    arrival = Arrival(process="closed", concurrency=cfg.concurrency)
    common = Common(arrival=arrival, seed=cfg.seed, input_tokens=cfg.prefix_tokens + cfg.suffix_tokens,
                    output_tokens=cfg.output_tokens)
    shape = {"groups": groups, "prompts_per_group": cfg.prompts_per_group, "prefix_tokens": cfg.prefix_tokens,
             "suffix_tokens": cfg.suffix_tokens}
    # Warm-up content comes from another seed, so it can never prime the measured prefixes.
    warm_shape = dict(shape, groups=1, prompts_per_group=cfg.warmup_requests)
    plan = (("shared-prefix", "shared-prefix", common, shape), ("unique-prefix", "unique-prefix", common, shape),
            ("warmup", "unique-prefix", replace(common, seed=cfg.seed + 10_000), warm_shape))
    made = {}
    for name, kind, com, opts in plan:
        workload = make_workload(kind, com, opts, model.path)
        made[name] = Workload(path=write_workload(out_dir / f"{name}.jsonl", workload),
                              workload_id=workload.workload_id)
    progress(f"workloads: {groups} groups x {cfg.prompts_per_group} prompts, prefix {cfg.prefix_tokens} + suffix "
             f"{cfg.suffix_tokens} tokens, {cfg.output_tokens} output tokens ({cfg.requests_per_arm} requests per arm)")
    return made


def control_reading(control: dict[str, Any] | None) -> dict[str, Any]:
    """The cache-off control against the unique-prefix arm must show no gain (its interval reaches 1)."""
    if control is None:
        return {"effect": None, "reading": "not run", "shows_gain": None}
    effect = control["effect"]
    shows_gain = effect.ci_high < 1.0
    return {"effect": effect.to_dict(), "per_repeat_ratio": control["per_repeat_ratio"], "shows_gain": shows_gain,
            "reading": "gain without caching (unexpected)" if shows_gain else "no gain (as expected)"}


def apply_control_veto(comparison: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """A gain in the cache-off control means the twins differ by more than caching: no adopt."""
    concl = comparison["conclusion"]
    if control.get("shows_gain") and concl["decision"] == "adopt":
        concl["decision"] = "inconclusive"
        concl["next_step"] = "the cache-off control also got faster: check that the workloads are true twins"
        concl["summary"] = (concl.get("summary") or "") + "; vetoed: the cache-off control shows a gain too"
        check_result(comparison)
    return comparison


def run_bench69(cfg: Bench69Config, *, root: Path = Path("."), progress: Progress = print) -> Bench69Outcome:
    """Run the whole bench; the returned outcome says where everything is."""
    cfg.check()
    placement = resolve_placement(cfg)
    if placement.notice:
        progress(placement.notice)
    started = time.monotonic()
    model = ensure_model(cfg.model, progress=progress)
    backend = get_backend(placement.backend)
    runtime = get_runtime(placement.runtime)
    run_id = new_run_id()
    run_dir = root / cfg.out_root / run_id
    run_dir.mkdir(parents=True)
    progress(f"bench-69: run {run_id} -> {cfg.out_root / run_id}")
    record = RunRecord(semantic_id=SEMANTIC_ID, run_id=run_id, run_label=f"{ARM_SHARED} vs {ARM_UNIQUE}",
                       requested=asdict(cfg) | {"out_root": str(cfg.out_root)},
                       effective={"backend": placement.backend, "runtime": placement.runtime,
                                  "requests_per_arm": cfg.requests_per_arm, "notice": placement.notice},
                       evidence_level="precheck", decision="blocked",
                       model=model.run_entry(), tokenizer=model.tokenizer_ref)
    atomic_write_json(run_dir / fingerprint_mod.FINGERPRINT_FILE, fingerprint_mod.collect())
    workloads = make_workloads(cfg, model, run_dir / "workloads", progress)
    record.workload_ids = sorted({w.workload_id for k, w in workloads.items() if k != "warmup"})
    protocol = Protocol(
        repeats=cfg.repeats, warmup_requests=cfg.warmup_requests,
        notes=(f"{ARM_UNIQUE} and {ARM_SHARED} interleaved on one server start",
               f"{ARM_CONTROL} on a second server start with prefix caching off (not interleaved)",
               "warm-up requests use their own workload and are not measured"))
    ctx = ArmContext(semantic_id=SEMANTIC_ID, run_id=run_id, run_dir=run_dir, model=model, workloads=workloads,
                     concurrency=cfg.concurrency, request_timeout_s=cfg.request_timeout_s, runtime=placement.runtime)
    base = BackendConfig(model_dir=str(model.path), served_model_name=cfg.model, port=0, seed=cfg.seed,
                         kv_cache_space_gib=cfg.kv_cache_space_gib, max_model_len=cfg.max_model_len,
                         in_container=placement.runtime == "docker")
    plan = [("cache-on", True, interleaved([ARM_UNIQUE, ARM_SHARED], cfg.repeats))]
    if cfg.control:
        plan.append(("cache-off", False, interleaved([ARM_CONTROL], cfg.repeats)))
    runs: list[ArmRun] = []
    servers: dict[str, dict[str, Any]] = {}
    start_failure: Failure | None = None
    for name, caching, schedule in plan:
        bcfg = replace(base, port=free_port(), prefix_caching=caching)
        try:
            with server_session(name, backend, runtime, bcfg, run_dir / "servers",
                                start_timeout_s=cfg.start_timeout_s, progress=progress,
                                on_start=lambda s: _write_servers(run_dir, servers, s)) as srv:
                warm_up(ctx, srv, progress)
                first = len(runs)
                run_schedule(schedule, lambda arm, r, srv=srv: run_arm(ctx, srv, arm, r),
                             before_each=lambda arm, r, srv=srv: srv.reset_prefix_cache(), progress=progress,
                             into=runs)
        except ServerStartError as exc:
            if not runs:
                raise  # nothing measured: the error and its log tail are the whole story
            message, _, tail = str(exc).partition("\n")
            start_failure = Failure(stage="server_start", kind="server_crash", message=f"server {name}: {message}",
                                    log_tail=tail or None)
            progress(f"server {name} did not start; keeping the arms already measured: {message}")
            break
        except KeyboardInterrupt:
            if not runs:
                raise
            # Ctrl-C: the server is already stopped; sign what was measured as an aborted run.
            start_failure = Failure(stage="run", kind="aborted", message="interrupted by the user")
            record.status = "aborted"
            progress("interrupted: writing and signing the arms already measured")
            break
        done = runs[first:]
        kv = kv_cache_config(done[0].result_path.with_name("metrics_before.prom")) if done else None
        _write_servers(run_dir, servers, srv, kv_cache=kv)
        if any(r.failure for r in runs):
            break

    control = control_reading(effect_of(runs, ARM_UNIQUE, ARM_CONTROL, seed=cfg.seed + 1, resamples=cfg.resamples))
    details = {"control": control, "servers": list(servers.values()),
               "workloads": {k: {"path": str(w.path.relative_to(run_dir)), "workload_id": w.workload_id}
                             for k, w in workloads.items()}}
    comparison = build_comparison(runs, arm_a=ARM_UNIQUE, arm_b=ARM_SHARED, semantic_id=SEMANTIC_ID, run_id=run_id,
                                  protocol=protocol, seed=cfg.seed, next_steps=NEXT_STEPS, details=details,
                                  resamples=cfg.resamples, failure=start_failure)
    comparison = apply_control_veto(comparison, control)
    failed = start_failure is not None or any(r.failure for r in runs)
    concl = comparison["conclusion"]
    record.evidence_level, record.decision = concl["evidence_level"], concl["decision"]
    if record.status != "aborted":
        record.status = "failed" if failed else "completed"
    record.images = _images(backend, servers)
    outputs = write_outputs(run_dir=run_dir, root=root, title="bench-69 INF-PREFIX-CACHE", runs=runs,
                            labels=[ARM_UNIQUE, ARM_SHARED, ARM_CONTROL], comparison=comparison, record=record,
                            wall_s=time.monotonic() - started, sign=cfg.sign)
    return Bench69Outcome(run_dir=run_dir, comparison=comparison, outputs=outputs, failed=failed)


def _images(backend: Backend, servers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Images the servers ran from (docker), else the native serving environment's package digest."""
    pulled = {(s["image"]["ref"], s["image"]["digest"]) for s in servers.values() if s.get("image")}
    if pulled:
        return [{"role": backend.role, "ref": ref, "digest": digest} for ref, digest in sorted(pulled)]
    python = str(backend.env.python) if isinstance(backend, VllmCpuBackend) else None
    return [native_image(backend.role, python)]


def _write_servers(run_dir: Path, servers: dict[str, dict[str, Any]], srv: ServerSession, **extra: Any) -> None:
    """servers.json: each server's exact command, version, pid and exit status, kept current."""
    servers[srv.name] = srv.record() | extra
    atomic_write_json(run_dir / "servers" / "servers.json", {"servers": list(servers.values())})
