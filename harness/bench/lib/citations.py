"""A bench cites another run by its signed manifest: audited first, then recorded by path and sha256.

Topics exchange only versioned JSON through manifests, never in-memory state: bench-72 and
bench-81 read bench-66's baseline, bench-68 reads ``cuda-proposal``'s ``proposal.json``.
``cite`` refuses a manifest that does not audit VALID, so an edited or forged baseline can
never feed a later decision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.jsonio import read_json
from harness.contract.result import Result, read_result
from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.dsse import EnvelopeError, parse_envelope
from harness.manifest.sign import MANIFEST_SUFFIX, MANIFESTS_DIR
from harness.rundir.fingerprint import FINGERPRINT_FILE
from harness.rundir.record import RunRecord, read_run_record


@dataclass(frozen=True)
class Citation:
    """A verified run: its manifest (path, sha256), run record and top-level result."""

    manifest: Path
    sha256: str
    run_dir: Path
    run: RunRecord
    result: Result | None

    def file(self, name: str) -> Path:
        """A file of the cited run (it is a verified subject of the manifest)."""
        return self.run_dir / name

    def to_dict(self, root: Path) -> dict[str, Any]:
        path = self.manifest.resolve()
        shown = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else path
        return {"manifest": str(shown), "sha256": self.sha256, "semantic_id": self.run.semantic_id,
                "run_id": self.run.run_id, "decision": self.run.decision, "evidence_level": self.run.evidence_level}

    def detail(self, *path: str) -> Any:
        """An entry of the cited result's details (``Result.detail``), or None where it has no result or entry."""
        return self.result.detail(*path) if self.result else None


def latest_manifest(root: Path, semantic_id: str, holding: str | None = None) -> Path | None:
    """The newest manifest of ``semantic_id`` under ``root/manifests`` (run ids sort by time), or None.

    With ``holding``, the newest whose subjects include a file of that name (one semantic id can
    cover several experiments: INF-PROPOSAL is both ``mech specdec`` and ``cuda proposal``). The
    subjects are only peeked at here; ``cite`` audits the one chosen.
    """
    found = sorted((Path(root) / MANIFESTS_DIR / semantic_id).glob(f"*{MANIFEST_SUFFIX}"))
    if holding is not None:
        found = [p for p in found if holding in _subject_names(p)]
    return found[-1] if found else None


def _subject_names(manifest: Path) -> set[str]:
    try:
        statement = json.loads(parse_envelope(manifest.read_bytes()).payload)
        return {Path(str(s.get("name", ""))).name for s in statement.get("subject") or [] if isinstance(s, dict)}
    except (EnvelopeError, OSError, ValueError, AttributeError):
        return set()  # an unreadable manifest holds nothing; citing it would fail its audit anyway


def cite(manifest: str | Path, root: Path, *, semantic_id: str | None = None) -> Citation:
    """Audit ``manifest`` under ``root`` and return what it vouches for; INVALID is an input error."""
    path = Path(manifest)
    if not path.is_file():
        raise InvalidInput(f"cited manifest {path}: no such file")
    (report,) = audit_paths([path], AuditConfig(root=Path(root)))
    if not report.valid:
        reasons = "; ".join(f.message for f in report.findings[:3])
        raise InvalidInput(f"cited manifest {path} does not audit VALID: {reasons}")
    predicate = report.predicate or {}
    if semantic_id and predicate.get("semantic_id") != semantic_id:
        raise InvalidInput(f"cited manifest {path} is a {predicate.get('semantic_id')} run, not {semantic_id}")
    run_dir = Path(root) / predicate["run_dir"]
    run = read_run_record(run_dir)
    result_name = run.output("result")
    result = read_result(run_dir / result_name) if result_name else None
    return Citation(manifest=path, sha256=sha256_file(path), run_dir=run_dir, run=run, result=result)


def cite_choice(choice: str, root: Path, semantic_id: str) -> Citation | None:
    """A cited run chosen by a knob: ``latest`` (the newest of ``semantic_id`` under root, if any), ``none``,
    or a path."""
    if choice == "none":
        return None
    if choice == "latest":
        newest = latest_manifest(root, semantic_id)
        return cite(newest, root, semantic_id=semantic_id) if newest else None
    return cite(choice, root, semantic_id=semantic_id)


def cited_saturation(result: Result | None) -> tuple[dict[str, Any] | None, str]:
    """A cited bench-66 result's saturation point (``details.baseline.saturation``: the last level that kept up,
    with its bracket), or None and why it cannot be used: an undetermined bracket, or a run from before the bracket
    rule. A citing bench then probes for itself and says so: what it cites being weak never fails it."""
    baseline = (result.detail("baseline") if result else None) or {}
    bracket = baseline.get("bracket")
    if not bracket:
        return None, ("that bench-66 run predates the saturation bracket (a fixed-list rule that measured the list's "
                      "length)")
    if not bracket.get("determined") or not baseline.get("saturation"):
        return None, f"its saturation bracket is undetermined ({bracket.get('reason')})"
    return baseline["saturation"], ""


def cited_device(citation: Citation, gpu: bool) -> set[str]:
    """The devices the cited run's host had, from its fingerprint: GPU names, or the CPU model."""
    try:
        fingerprint = read_json(citation.file(FINGERPRINT_FILE))
    except (OSError, ValueError, InvalidInput):
        return set()
    if gpu:
        return {str(g.get("name")) for g in fingerprint.get("gpus") or []}
    return {str((fingerprint.get("host") or {}).get("cpu_model"))}


def setup_mismatch(citation: Citation, *, backend: str, model_version: str | None, device: str | None,
                   gpu: bool) -> str | None:
    """Why a cited run measured another setup than this run serves (backend, model, device), or None. A device this
    run cannot name (no NVML here) is not compared."""
    theirs = citation.run.effective.get("backend")
    if theirs and theirs != backend:
        return f"it served backend {theirs}, this run serves {backend}"
    cited_model = citation.run.model_version
    if cited_model and model_version and cited_model != model_version:
        return f"it served model version {cited_model[:19]}, this run serves {model_version[:19]}"
    devices = cited_device(citation, gpu)
    if device and devices and device not in devices:
        return f"it ran on {', '.join(sorted(devices))}, this run on {device}"
    return None
