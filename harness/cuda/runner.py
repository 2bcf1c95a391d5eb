"""Run one experiment and write its run directory.

``runs/cuda/<name>/<run_id>/`` holds ``fingerprint.json`` (collected when
the run starts), ``result.json`` (schema-valid, kind
``mechanism``, profile INF-CUDA-MECHANISM), ``samples.jsonl`` (raw timing
samples, appended and flushed as each series finishes), ``summary.txt`` for
people, any extra documents the experiment writes, and ``run.json`` (what was
requested, what took effect) so the directory can be signed.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import (
    Conclusion,
    Correctness,
    Identity,
    Performance,
    WorkloadInfo,
    atomic_write_json,
    atomic_write_text,
    build_result,
    write_result,
)
from harness.contract.result import utc_now
from harness.cuda.device import import_torch, resolve_device
from harness.cuda.registry import Experiment
from harness.fingerprint import FINGERPRINT_FILE, environment_group
from harness.fingerprint import collect as collect_fingerprint
from harness.ids import new_run_id, sha256_canonical
from harness.runinfo import RunRecord, native_image, write_run_record

PROFILE_ID = "INF-CUDA-MECHANISM"
DEFAULT_OUT_ROOT = Path("runs/cuda")
EXECUTION_ONLY = frozenset({"threads"})  # config fields that do not change what is measured


class SampleSink:
    """Appends one JSON line per finished series to ``samples.jsonl`` and flushes it."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
            fh.flush()


@dataclass(frozen=True)
class RunContext:
    """What an experiment gets besides its config: the resolved device and where to write."""

    device: str
    run_dir: Path
    samples: SampleSink


@dataclass(frozen=True)
class Outcome:
    """What an experiment hands back; the runner adds identity and environment."""

    run_label: str
    workload: WorkloadInfo
    performance: Performance
    correctness: Correctness
    conclusion: Conclusion
    details: dict[str, Any]
    summary_lines: tuple[str, ...]
    effective: dict[str, Any] = field(default_factory=dict)
    model: dict[str, str] | None = None
    tokenizer: dict[str, str] | None = None
    model_null_reason: str = "synthetic tensors; no model checkpoint is involved"


@dataclass(frozen=True)
class RunOutput:
    run_dir: Path
    result: dict[str, Any]


def workload_id(experiment: str, config: Any) -> str:
    """sha256 of the canonical experiment spec: same id, same inputs and protocol.

    Where it runs (device, CPU threads) is left out: the same workload on two machines has one id.
    """
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k not in EXECUTION_ONLY}
    spec = {"experiment": experiment, "config": settings}
    return sha256_canonical(spec)


def run_experiment(
    experiment: Experiment, config: Any, *, device: str = "auto", out_root: Path = DEFAULT_OUT_ROOT
) -> RunOutput:
    """Resolve the device, run ``experiment`` and write a complete run directory."""
    config.check()
    torch = import_torch()
    effective_device = resolve_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)  # this process runs one experiment; recorded in run.json
    run_id = new_run_id()
    run_dir = Path(out_root) / experiment.name / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    started = utc_now()
    fingerprint = collect_fingerprint()  # the machine as it was when the run started; signing reuses it
    atomic_write_json(run_dir / FINGERPRINT_FILE, fingerprint)
    ctx = RunContext(device=effective_device, run_dir=run_dir, samples=SampleSink(run_dir / "samples.jsonl"))
    try:
        outcome: Outcome = experiment.run(config, ctx)
    except BaseException as exc:
        _abandon(experiment, config, device, effective_device, run_dir, run_id, started, exc)
        raise

    identity = Identity(
        semantic_id=experiment.semantic_id,
        workload_id=workload_id(experiment.name, config),
        run_label=outcome.run_label,
        run_id=run_id,
        model=outcome.model,
        tokenizer=outcome.tokenizer,
    )
    if outcome.model is None:
        identity.null_reasons["model"] = outcome.model_null_reason
    if outcome.tokenizer is None:
        identity.null_reasons["tokenizer"] = outcome.model_null_reason
    environment = environment_group(
        PROFILE_ID, "torch", torch.__version__, backend_command=_argv(),
        doc=fingerprint,
    )
    doc = build_result(
        kind="mechanism",
        identity=identity,
        workload=outcome.workload,
        environment=environment,
        performance=outcome.performance,
        correctness=outcome.correctness,
        conclusion=outcome.conclusion,
        details={"experiment": experiment.name, "device": effective_device, **outcome.details},
    )
    write_result(run_dir / "result.json", doc)
    atomic_write_text(run_dir / "summary.txt", _summary_text(experiment, doc, outcome))
    record = RunRecord(
        semantic_id=experiment.semantic_id,
        run_id=run_id,
        run_label=outcome.run_label,
        requested={"experiment": experiment.name, "device": device, **dataclasses.asdict(config)},
        effective={"experiment": experiment.name, "device": effective_device, "torch_threads": torch.get_num_threads(),
                   **outcome.effective},
        evidence_level=outcome.conclusion.evidence_level,
        decision=outcome.conclusion.decision,
        workload_ids=[identity.workload_id],
        command=_argv(),
        images=[native_image(PROFILE_ID)],
        model=outcome.model,
        tokenizer=outcome.tokenizer,
        started_utc=started,
        ended_utc=utc_now(),
        status="failed" if outcome.conclusion.failure else "completed",
    )
    write_run_record(run_dir, record)
    return RunOutput(run_dir=run_dir, result=doc)


def _abandon(experiment: Experiment, config: Any, device: str, effective_device: str, run_dir: Path,
             run_id: str, started: str, exc: BaseException) -> None:
    """A run directory without samples is removed; one holding samples keeps them under a failed run.json."""
    if not (run_dir / "samples.jsonl").exists():
        shutil.rmtree(run_dir)
        return
    write_run_record(run_dir, RunRecord(
        semantic_id=experiment.semantic_id, run_id=run_id, run_label=experiment.name,
        requested={"experiment": experiment.name, "device": device, **dataclasses.asdict(config)},
        effective={"experiment": experiment.name, "device": effective_device, "error": f"{type(exc).__name__}: {exc}"},
        evidence_level="precheck", decision="blocked", command=_argv(), images=[native_image(PROFILE_ID)],
        started_utc=started, ended_utc=utc_now(),
        status="aborted" if isinstance(exc, KeyboardInterrupt) else "failed",
    ))


def _argv() -> list[str]:
    return list(sys.argv) if sys.argv and sys.argv[0] else ["infkit"]


def _summary_text(experiment: Experiment, doc: dict[str, Any], outcome: Outcome) -> str:
    c = doc["conclusion"]
    verdict = "VALID" if c["valid"] else "INVALID: " + "; ".join(c["invalid_reasons"])
    lines = [
        f"{experiment.semantic_id} / {experiment.name} on {doc['details']['device']}  run {doc['identity']['run_id']}",
        *outcome.summary_lines,
        f"evidence={c['evidence_level']} decision={c['decision']} {verdict}",
    ]
    if c["failure"]:
        f = c["failure"]
        lines.append(f"failure: {f['stage']}/{f['kind']}: {f['message']}")
    lines.append(f"next: {c['next_step']}")
    return "\n".join(lines) + "\n"


def mechanism_workload(seed: int, reason: str, *, request_count: int = 0,
                   input_lengths: tuple[int, ...] = (), output_lengths: tuple[int, ...] = (),
                   concurrency: int | None = None, max_num_seqs: int | None = None) -> WorkloadInfo:
    """A workload group for a mechanism run: token summaries of its sequences (zeros when none)."""
    def tokens(lengths: tuple[int, ...]) -> dict[str, float]:
        if not lengths:
            return {"min": 0, "max": 0, "mean": 0.0, "total": 0}
        return {"min": min(lengths), "max": max(lengths), "mean": sum(lengths) / len(lengths), "total": sum(lengths)}

    info = WorkloadInfo(
        request_count=request_count, input_tokens=tokens(input_lengths), output_tokens=tokens(output_lengths),
        arrival={"process": "batch" if request_count else "none"}, concurrency=concurrency, seed=seed,
        token_budget={"max_num_batched_tokens": None, "max_num_seqs": max_num_seqs}, kind="mechanism",
    )
    if concurrency is None:
        info.null_reasons["concurrency"] = reason
    return info
