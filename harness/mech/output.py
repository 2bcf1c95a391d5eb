"""What every mechanism run writes: result.json, run.json, summary.txt and optional PNG plots.

A mechanism returns a ``MechOutput`` (pure data, no wall clock); ``write_mech_run``
turns it into files under ``<out_root>/<name>/<run_id>/`` through the one
``harness.rundir.directory.RunDirectory`` and signs the folder. Everything that goes
into result.json except ``identity.run_id``/``created_utc`` and the environment
fingerprint is a function of the mechanism's inputs, so two runs with the same
inputs and seeds produce byte-identical results once those fields are fixed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.contract import (
    Conclusion,
    Correctness,
    Environment,
    Identity,
    Performance,
    WorkloadInfo,
    build_result,
)
from harness.contract.distribution import token_summary
from harness.contract.result import utc_now
from harness.contract.verdict import verdict_lines
from harness.ids import sha256_bytes, sha256_canonical
from harness.rundir.directory import Finished, RunDirectory
from harness.rundir.record import native_image

PROFILE_ID = "INF-CPU"
SIMULATOR_BACKEND = "infkit-mech"
NO_WORKLOAD_ID = sha256_bytes(b"no-workload")
RESULT_FILE = "result.json"

PlotFn = Callable[[Path], None]


def config_ref(name: str, config: dict[str, Any]) -> dict[str, str]:
    """A model reference for a simulated model: its name and the hash of its config dict."""
    return {"name": name, "version": "config:" + sha256_canonical(config)}


def no_workload(reason: str, seed: int = 0) -> WorkloadInfo:
    """The workload group of a formula-only mechanism (no requests)."""
    info = WorkloadInfo(request_count=0, input_tokens=token_summary([]), output_tokens=token_summary([]),
                        arrival={"process": "none"}, concurrency=None, seed=seed)
    info.null_reasons["concurrency"] = reason
    return info


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], floatfmt: str = ".4g") -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, floatfmt=floatfmt, tablefmt="github")


@dataclass(frozen=True)
class MechOutput:
    """Everything a mechanism computed; ``write_mech_run`` adds identity and environment."""

    semantic_id: str
    run_label: str
    model: dict[str, str] | None
    workload: WorkloadInfo
    performance: Performance
    correctness: Correctness
    conclusion: Conclusion
    details: dict[str, Any]
    summary_text: str
    requested: dict[str, Any]
    kind: str = "simulation"
    workload_id: str = NO_WORKLOAD_ID
    model_null_reason: str = "no model: the mechanism is model-independent"
    tokenizer: dict[str, str] | None = None  # set when real prompts were tokenized (live calibration)
    plots: dict[str, PlotFn] = field(default_factory=dict)
    extra_files: dict[str, str] = field(default_factory=dict)


def simulator_environment(created_utc: str) -> tuple[Environment, dict[str, Any]]:
    """The environment group and its fingerprint document, fingerprinted as of ``created_utc``.

    Pinning the fingerprint's timestamp to the run's keeps wall-clock time out of the
    hashed parts; ``fingerprint.json`` is the document whose sha256 the group names.
    """
    from harness.rundir.fingerprint import collect, environment_group

    doc = collect()
    doc["created_utc"] = created_utc
    return environment_group(PROFILE_ID, SIMULATOR_BACKEND, __version__, doc=doc), doc


def result_document(out: MechOutput, *, run_id: str, created_utc: str, environment: Environment) -> dict[str, Any]:
    identity = Identity(semantic_id=out.semantic_id, workload_id=out.workload_id, run_label=out.run_label,
                        run_id=run_id, model=out.model, tokenizer=out.tokenizer, created_utc=created_utc)
    if out.tokenizer is None:
        identity.null_reasons["tokenizer"] = "simulated tokens: no tokenizer is involved"
    if out.model is None:
        identity.null_reasons["model"] = out.model_null_reason
    return build_result(kind=out.kind, identity=identity, workload=out.workload, environment=environment,  # type: ignore[arg-type]
                        performance=out.performance, correctness=out.correctness, conclusion=out.conclusion,
                        details=out.details)


def write_mech_run(out_root: str | Path, name: str, out: MechOutput, *, run_id: str | None = None,
                   created_utc: str | None = None, sign: bool = True, root: str | Path | None = None) -> Finished:
    """Write the run under ``out_root/name/run_id`` through ``RunDirectory`` and sign it (``sign``).

    fingerprint.json, result.json, extra files, plots, summary.txt and run.json (with ``outputs``);
    the manifest goes under ``root`` (default: the current directory).
    """
    started = created_utc or utc_now()
    environment, fingerprint = simulator_environment(started)
    rd = RunDirectory.create(
        Path(out_root) / name, semantic_id=out.semantic_id, run_label=out.run_label, requested=out.requested,
        effective=out.details.get("effective", out.requested), root=root, run_id=run_id, fingerprint=fingerprint,
        sign=sign, started_utc=started, images=[native_image(PROFILE_ID)], model=out.model, tokenizer=out.tokenizer,
        workload_ids=[out.workload_id] if out.workload_id != NO_WORKLOAD_ID else [])
    try:
        rd.write_result(RESULT_FILE, result_document(out, run_id=rd.run_id, created_utc=started,
                                                     environment=environment))
        for filename, text in out.extra_files.items():
            rd.write_text(filename, text)
        for filename, draw in out.plots.items():
            rd.figure(filename, draw)
    except BaseException as exc:
        # the output is recomputable from the inputs: a half-written folder would only mislead
        rd.abandon(has_data=False, error=exc)
        raise
    lines = verdict_lines(f"{out.semantic_id} {out.run_label}", out.conclusion.to_dict())
    summary = "\n".join(lines) + "\n\n" + out.summary_text
    return rd.finish(summary=summary, result=RESULT_FILE, evidence_level=out.conclusion.evidence_level,
                     decision=out.conclusion.decision)


def save_figure(fig: Any, path: Path) -> None:
    """Save a mechanism's figure (harness.report.plots.save_figure at the mechanisms' size)."""
    from harness.report.plots import save_figure as save_png

    save_png(fig, path, dpi=110, bbox_inches="tight")
