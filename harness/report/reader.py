"""Read one audited run: its run record, fingerprint, result document, headline figures and PNGs.

Only what the audit verified is read. JSON documents come from the audit itself (parsed from
the bytes whose sha256 matched the signed one); figures are read once, through one descriptor
opened without following a link or blocking, and hashed again against the signed digest, so a
file swapped after the audit (for another file, a link or a pipe) is left out with the reason,
never shown.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.result import Conclusion, Result
from harness.errors import InvalidInput
from harness.manifest.subjects import is_within, unsafe_name_reason
from harness.report.inputs import AuditedInput
from harness.rundir.record import RUN_FILE, RunRecord

COMPARISON_FILE = "comparison.json"
RESULT_FILE = "result.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_FIGURE_BYTES = 8 * 1024 * 1024
MAX_FIGURES_PER_RUN = 12
PERFORMANCE_HEADLINE = (("ttft_ms", "TTFT p50"), ("tpot_ms", "TPOT p50"), ("e2e_ms", "E2E p50"))
THROUGHPUT_HEADLINE = (("output_tokens_per_s", "output throughput", "tok/s"),
                       ("request_rate_rps", "request rate", "req/s"))
CONCLUSION_FIELDS = ("decision", "evidence_level", "valid", "invalid_reasons", "summary", "failure", "next_step")


@dataclass(frozen=True)
class Figure:
    """A signed PNG of a run, verified against its subject digest."""

    name: str  # subject name, relative to the root
    sha256: str
    png: bytes = field(repr=False)


@dataclass(frozen=True)
class RunView:
    """What a report shows of one VALID run; every value comes from verified bytes."""

    run: RunRecord
    run_dir: str  # relative to the root, as the manifest names it
    fingerprint: dict[str, Any] | None
    result_name: str | None
    result: Result | None
    headline: tuple[dict[str, Any], ...]
    conclusion: dict[str, Any] | None
    figures: tuple[Figure, ...]
    summary_name: str | None
    notes: tuple[str, ...]  # what could not be shown, and why

    @property
    def semantic_id(self) -> str:
        return self.run.semantic_id

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def kind(self) -> str | None:
        return self.result.kind if self.result else None

    @property
    def backend(self) -> str | None:
        backend = self.result.environment.backend if self.result else None
        return f"{backend['name']} {backend['version']}" if backend else None


def result_file(run: RunRecord, subjects: dict[str, str], run_dir: str) -> str:
    """The run's top-level result document: outputs.result, else comparison.json, else result.json."""
    named = run.output("result")
    if named:
        return named
    return COMPARISON_FILE if f"{run_dir}/{COMPARISON_FILE}" in subjects else RESULT_FILE


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _headline_item(item: Any) -> dict[str, Any] | None:
    """A declared headline figure, or None when it is not of the documented shape."""
    if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("unit"), str)):
        return None
    if not (item.get("value") is None or _number(item.get("value"))):
        return None
    if any(k in item and not _number(item[k]) for k in ("ci_low", "ci_high")):
        return None
    keep = {k: item[k] for k in ("name", "value", "unit", "ci_low", "ci_high", "arm") if k in item}
    return keep if "arm" not in keep or isinstance(keep["arm"], str) else None


def _derived_headline(result: Result) -> list[dict[str, Any]]:
    out = []
    effect = result.conclusion.effect
    if effect is not None:
        arms = f"{effect.arm_b} vs {effect.arm_a}" if effect.arm_a and effect.arm_b else None
        out.append({"name": f"effect on {effect.metric}", "value": effect.value,
                    "unit": "ratio" if effect.no_effect == 1 else "", "ci_low": effect.ci_low,
                    "ci_high": effect.ci_high, **({"arm": arms} if arms else {})})
    perf = result.performance
    for key, name in PERFORMANCE_HEADLINE:
        dist = getattr(perf, key)
        if dist is not None and _number(dist.get("p50")):
            out.append({"name": name, "value": dist["p50"], "unit": "ms"})
    for key, name, unit in THROUGHPUT_HEADLINE:
        if perf.throughput is not None and _number(perf.throughput.get(key)):
            out.append({"name": name, "value": perf.throughput[key], "unit": unit})
    return out


def headline_figures(result: Result) -> tuple[list[dict[str, Any]], list[str]]:
    """(headline figures, notes): details.headline when the result declares it, else derived
    from the paired effect and the performance group's P50 latencies and throughput."""
    declared = result.detail("headline")
    if declared is None:
        return _derived_headline(result), []
    if not isinstance(declared, list):
        return [], ["details.headline is not a list; no headline figures shown"]
    items = [_headline_item(i) for i in declared]
    dropped = sum(i is None for i in items)
    notes = [f"{dropped} details.headline entr{'y' if dropped == 1 else 'ies'} not of the form "
             "{name, value, unit, ci_low?, ci_high?, arm?}: left out"] if dropped else []
    return [i for i in items if i is not None], notes


def conclusion_fields(conclusion: Conclusion) -> dict[str, Any]:
    """What a report row shows of a conclusion (``CONCLUSION_FIELDS``), the failure as the result writes it."""
    return {k: getattr(conclusion, k) if k != "failure" else conclusion.to_dict()["failure"]
            for k in CONCLUSION_FIELDS}


def _figure_names(run: RunRecord, subjects: dict[str, str], run_dir: str) -> list[str]:
    if run.outputs is not None:
        return [f"{run_dir}/{n}" for n in run.outputs["figures"]]
    prefix = f"{run_dir}/"
    return sorted(n for n in subjects if n.startswith(prefix) and "/" not in n[len(prefix):] and n.endswith(".png"))


def _open_verified(root: Path, name: str) -> int:
    """A descriptor on the subject ``name`` under ``root``: no link followed at the last component, no
    parent outside the root, never blocking (a FIFO put in its place opens and is refused)."""
    if unsafe_name_reason(name) is not None:
        raise OSError(errno.EINVAL, "not a plain relative name")
    root_real = os.path.realpath(root)
    parent = os.path.realpath(os.path.join(root_real, os.path.dirname(name)))
    if not is_within(parent, root_real):
        raise OSError(errno.EXDEV, "its folder lies outside the root")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(os.path.join(parent, os.path.basename(name)), flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def _read_figure(root: Path, name: str, signed: str | None) -> tuple[Figure | None, str | None]:
    """Read a signed figure once, by descriptor, and keep it only when its bytes are the signed ones."""
    if signed is None:
        return None, f"figure {name} is not a signed subject: left out"
    try:
        fd = _open_verified(root, name)
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        return None, f"figure {name} cannot be read ({why}): left out"
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_FIGURE_BYTES + 1)
    if len(data) > MAX_FIGURE_BYTES:
        return None, f"figure {name} is larger than {MAX_FIGURE_BYTES >> 20} MiB: left out"
    digest = hashlib.sha256(data).hexdigest()
    if digest != signed:
        return None, f"figure {name} changed after the audit (sha256 {digest[:16]}…): left out"
    if not data.startswith(PNG_MAGIC):
        return None, f"figure {name} is not a PNG: left out"
    return Figure(name, digest, data), None


def _verified_result(doc: dict[str, Any] | None, name: str, notes: list[str]) -> Result | None:
    """The verified document at ``name`` as a typed result, or None with a note saying why there is none."""
    if doc is None or doc.get("schema") != "infkit/result/v1":
        notes.append(f"no verified result document at {name}: no headline figures")
        return None
    try:
        return Result.from_dict(doc, name)
    except InvalidInput as exc:  # the audit checked it already; a result no longer read is noted, never shown
        notes.append(f"{exc.message}: no headline figures")
        return None


def read_run(item: AuditedInput, root: Path) -> RunView:
    """The view of a VALID input (the caller checks ``item.valid``)."""
    audit = item.audit
    assert audit is not None and audit.predicate is not None  # a VALID input has both
    run_dir = audit.predicate["run_dir"]
    docs, subjects = audit.documents, audit.subject_digests
    # the evidence rules already required a verified, schema-valid run.json
    run = RunRecord.from_dict(docs[f"{run_dir}/{RUN_FILE}"], f"{run_dir}/{RUN_FILE}")
    notes: list[str] = []
    fingerprint = docs.get(audit.predicate["fingerprint"]["path"])
    if fingerprint is None:
        notes.append("fingerprint.json is not a verified infkit document: no environment diff for this run")
    result_name = f"{run_dir}/{result_file(run, subjects, run_dir)}"
    result = _verified_result(docs.get(result_name), result_name, notes)
    headline, headline_notes = headline_figures(result) if result else ([], [])
    notes += headline_notes
    conclusion = conclusion_fields(result.conclusion) if result else None
    figures = []
    names = list(dict.fromkeys(_figure_names(run, subjects, run_dir)))
    if len(names) > MAX_FIGURES_PER_RUN:
        notes.append(f"{len(names) - MAX_FIGURES_PER_RUN} figures beyond the first {MAX_FIGURES_PER_RUN}: left out")
    for name in names[:MAX_FIGURES_PER_RUN]:
        figure, note = _read_figure(root, name, subjects.get(name))
        if figure:
            figures.append(figure)
        else:
            notes.append(note)
    summary = run.outputs["summary"] if run.outputs is not None else "summary.txt"
    summary_name = f"{run_dir}/{summary}" if f"{run_dir}/{summary}" in subjects else None
    return RunView(run, run_dir, fingerprint, result_name if result else None, result, tuple(headline),
                   conclusion, tuple(figures), summary_name, tuple(notes))
