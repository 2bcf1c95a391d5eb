"""Report inputs: run directories or manifests, each audited before anything of it is read.

An input is a signed manifest (``manifests/<semantic_id>/<run_id>.intoto.json``), a run
directory (its manifest is found under the root by the run's semantic_id and run_id), or a
folder holding manifests (every ``*.intoto.json`` under it). Whatever cannot be mapped to a
manifest — a missing path, an unsigned run, an unreadable run.json — becomes an INVALID input
with the reason; it never stops the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from harness.manifest.audit import (
    AuditConfig,
    ManifestReport,
    audit_manifest,
    auditor_keys,
    duplicate_run_dirs,
    find_manifests,
)
from harness.manifest.findings import Finding
from harness.manifest.sign import run_dir_manifest
from harness.rundir.record import RUN_FILE


@dataclass(frozen=True)
class AuditedInput:
    """One input as the user named it, its manifest (when one was found) and the audit's verdict."""

    given: str
    manifest: Path | None
    audit: ManifestReport | None
    problems: tuple[Finding, ...] = ()  # why the input could not be mapped, or disagrees with its manifest

    @property
    def valid(self) -> bool:
        return self.audit is not None and self.audit.valid and not self.problems

    @property
    def reasons(self) -> tuple[Finding, ...]:
        return (*self.problems, *(self.audit.findings if self.audit else ()))


def _expand(given: str, root: Path) -> list[tuple[Path | None, Path | None, Finding | None]]:
    """(manifest, run directory the user named, problem) for one named path."""
    path = Path(given)
    if not path.exists():
        return [(None, None, Finding("input", "no such file or directory"))]
    if path.is_file():
        return [(path, None, None)]  # a file is read as a manifest; audit names what is wrong with it
    if not path.is_dir():
        return [(None, None, Finding("input", "not a file or directory"))]
    if (path / RUN_FILE).is_file():
        manifest, why = run_dir_manifest(path, root)
        return [(manifest, path, Finding("input", why) if why else None)]
    manifests = find_manifests([path])
    if not manifests:
        return [(None, None, Finding("input", f"neither a run directory (no {RUN_FILE}) nor a folder of manifests"))]
    return [(m, None, None) for m in manifests]


def _names_run_dir(report: ManifestReport, run_dir: Path, root: Path) -> Finding | None:
    named = (report.predicate or {}).get("run_dir")
    if named is None or os.path.realpath(root / named) == os.path.realpath(run_dir):
        return None
    return Finding("input", f"the manifest {report.manifest} signs the run directory {named}, not {run_dir}")


def audit_inputs(paths: list[str], config: AuditConfig) -> list[AuditedInput]:
    """Map every named path to manifests and audit each once (a run named twice is one input)."""
    trusted = auditor_keys(config)
    out: list[AuditedInput] = []
    seen: set[str] = set()
    for given in paths:
        for manifest, run_dir, problem in _expand(given, config.root):
            if manifest is None:
                out.append(AuditedInput(given, None, None, (problem,) if problem else ()))
                continue
            real = os.path.realpath(manifest)
            if real in seen:
                continue
            seen.add(real)
            report = audit_manifest(manifest, config.root, trusted, excerpt=config.excerpt)
            mismatch = _names_run_dir(report, run_dir, config.root) if run_dir else None
            out.append(AuditedInput(given, manifest, report, (mismatch,) if mismatch else ()))
    audited = [i for i in out if i.audit is not None]
    checked = iter(duplicate_run_dirs([i.audit for i in audited], config.root))
    by_id = {id(i): replace(i, audit=next(checked)) for i in audited}
    return [by_id.get(id(i), i) for i in out]
