"""Run one experiment and write its run directory through ``harness.rundir.directory.RunDirectory``.

``runs/cuda/<name>/<run_id>/`` holds ``fingerprint.json`` (collected when
the run starts), ``result.json`` (schema-valid, kind
``mechanism``, profile INF-CUDA-MECHANISM), ``samples.jsonl`` (raw timing
samples, appended and flushed as each series finishes), ``summary.txt`` for
people, any extra documents the experiment writes, and ``run.json`` (what was
requested, what took effect, ``outputs``); the directory is signed when the run ends.
A run that raises is removed when it holds no samples, else kept under a failed run.json.
"""

from __future__ import annotations

import dataclasses
import json
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
    build_result,
)
from harness.contract.verdict import verdict_lines
from harness.cuda.device import import_torch, resolve_device
from harness.cuda.registry import Experiment
from harness.ids import sha256_canonical
from harness.knobs import config_dict
from harness.rundir.directory import Finished, RunDirectory
from harness.rundir.fingerprint import environment_group
from harness.rundir.record import native_image

PROFILE_ID = "INF-CUDA-MECHANISM"
DEFAULT_OUT_ROOT = Path("runs/cuda")
EXECUTION_ONLY = frozenset({"threads"})  # config fields that do not change what is measured
RESULT_FILE = "result.json"
SAMPLES_FILE = "samples.jsonl"


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
    finished: Finished


def workload_id(experiment: str, config: Any) -> str:
    """sha256 of the canonical experiment spec as it runs (``config.sized_for(device)``): same id, same inputs
    and protocol. Where it runs (device, CPU threads) is left out: the same workload on two machines has one id."""
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k not in EXECUTION_ONLY}
    spec = {"experiment": experiment, "config": settings}
    return sha256_canonical(spec)


def run_experiment(experiment: Experiment, config: Any, *, device: str = "auto", out_root: Path = DEFAULT_OUT_ROOT,
                   sign: bool = True, root: Path | None = None) -> RunOutput:
    """Resolve the device, run ``experiment`` and write a complete run directory, signed when ``sign``."""
    torch = import_torch()
    effective_device = resolve_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)  # this process runs one experiment; recorded in run.json
    requested = {"experiment": experiment.name, "device": device, **config_dict(config)}
    rd = RunDirectory.create(  # fingerprint.json: the machine as it was when the run started
        Path(out_root) / experiment.name, semantic_id=experiment.semantic_id, run_label=experiment.name,
        requested=requested, effective={"experiment": experiment.name, "device": effective_device}, root=root,
        sign=sign, command=_argv(), images=[native_image(PROFILE_ID)],
        workload_ids=[workload_id(experiment.name, config.sized_for(effective_device))])
    ctx = RunContext(device=effective_device, run_dir=rd.path, samples=SampleSink(rd.path / SAMPLES_FILE))
    try:
        outcome: Outcome = experiment.run(config, ctx)
    except BaseException as exc:
        # A run without samples measured nothing and is removed; one holding samples keeps them.
        rd.abandon(has_data=(rd.path / SAMPLES_FILE).exists(), error=exc)
        raise
    doc = _result(experiment, config, outcome, rd, effective_device, torch.__version__)
    rd.write_result(RESULT_FILE, doc)
    done = rd.finish(
        summary=_summary_text(experiment, doc, outcome), result=RESULT_FILE,
        evidence_level=outcome.conclusion.evidence_level, decision=outcome.conclusion.decision,
        status="failed" if outcome.conclusion.failure else "completed", run_label=outcome.run_label,
        effective={"experiment": experiment.name, "device": effective_device,
                   "torch_threads": torch.get_num_threads(), **outcome.effective},
        model=outcome.model, tokenizer=outcome.tokenizer)
    return RunOutput(run_dir=rd.path, result=doc, finished=done)


def _result(experiment: Experiment, config: Any, outcome: Outcome, rd: RunDirectory, device: str,
            torch_version: str) -> dict[str, Any]:
    identity = Identity(semantic_id=experiment.semantic_id,
                        workload_id=workload_id(experiment.name, config.sized_for(device)),
                        run_label=outcome.run_label, run_id=rd.run_id, model=outcome.model,
                        tokenizer=outcome.tokenizer)
    if outcome.model is None:
        identity.null_reasons["model"] = outcome.model_null_reason
    if outcome.tokenizer is None:
        identity.null_reasons["tokenizer"] = outcome.model_null_reason
    environment = environment_group(PROFILE_ID, "torch", torch_version, backend_command=_argv(), doc=rd.fingerprint)
    return build_result(kind="mechanism", identity=identity, workload=outcome.workload, environment=environment,
                        performance=outcome.performance, correctness=outcome.correctness,
                        conclusion=outcome.conclusion,
                        details={"experiment": experiment.name, "device": device, **outcome.details})


def _argv() -> list[str]:
    return list(sys.argv) if sys.argv and sys.argv[0] else ["infkit"]


def _summary_text(experiment: Experiment, doc: dict[str, Any], outcome: Outcome) -> str:
    title = (f"{experiment.semantic_id} / {experiment.name} on {doc['details']['device']}  run "
             f"{doc['identity']['run_id']}")
    return "\n".join([*verdict_lines(title, doc["conclusion"]), "", *outcome.summary_lines]) + "\n"


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
