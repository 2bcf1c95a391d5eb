"""A signed run's small files published apart from the rest: what a repository commits as a reference run.

``publish`` audits a run's manifest, then copies its record (run.json), summary, fingerprint and top-level result,
each at the name it is signed under, with the manifest and the signer's public key, into an excerpt root (one per
repository: ``benchmarks/results``), replacing that root's earlier excerpt of the same bench.
``infkit audit --excerpt --root DEST DEST/manifests`` then verifies every copied file against its signed digest and
lists the subjects left out (requests, server logs, workloads) as held back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.keys import PUBLIC_KEY_SUFFIX
from harness.manifest.sign import KEYS_DIR, MANIFEST_SUFFIX, MANIFESTS_DIR, run_dir_manifest
from harness.rundir.record import RUN_FILE, RunRecord

SMALL_FILES = ("run.json", "summary.txt", "fingerprint.json")


def manifest_of(run_or_manifest: Path, root: Path) -> Path:
    """The manifest a run directory is signed into (found by its run.json), or the manifest named."""
    if run_or_manifest.is_file():
        return run_or_manifest
    if not (run_or_manifest / "run.json").is_file():
        raise InvalidInput(f"{run_or_manifest}: neither a manifest nor a run directory (no run.json)")
    manifest, why = run_dir_manifest(run_or_manifest, root)
    if manifest is None:
        raise InvalidInput(f"{run_or_manifest}: {why}")
    return manifest


def publish(run_or_manifest: Path, dest: Path, root: Path = Path(".")) -> list[str]:
    """Copy the excerpt of an intact signed run into the excerpt root ``dest``, replacing the bench's earlier
    excerpt there; the names it wrote. Nothing is changed in ``dest`` unless every file was copied."""
    manifest = manifest_of(run_or_manifest, root)
    report = audit_paths([manifest], AuditConfig(root=root))[0]
    if not report.valid or report.predicate is None or report.signer_keyid is None:
        reasons = "; ".join(f.message for f in report.findings[:3])
        raise InvalidInput(f"{manifest}: the run does not audit intact ({reasons}): nothing published")
    predicate = report.predicate
    run_dir = predicate["run_dir"]
    record = f"{run_dir}/{RUN_FILE}"  # a run that audits intact holds a verified run.json
    run = RunRecord.from_dict(report.documents.get(record), record)
    wanted = [f"{run_dir}/{name}" for name in (*SMALL_FILES, run.output("result"))
              if name and f"{run_dir}/{name}" in report.subject_digests]
    signed_as = f"{MANIFESTS_DIR}/{predicate['semantic_id']}/{manifest.name}"
    key = f"{MANIFESTS_DIR}/{KEYS_DIR}/{report.signer_keyid}{PUBLIC_KEY_SUFFIX}"
    sources = {**{name: root / name for name in wanted}, signed_as: manifest, key: root / key}
    stage = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        for name, source in sources.items():
            _copy(source, stage / name)
        for earlier in sorted((dest / MANIFESTS_DIR / predicate["semantic_id"]).glob(f"*{MANIFEST_SUFFIX}")):
            _remove_excerpt(dest, earlier)
        for name in sources:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / name, dest / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return list(sources)


def _remove_excerpt(dest: Path, manifest: Path) -> None:
    """An earlier excerpt of the bench: its manifest and its run folder, named by the same run id (never outside
    ``dest``)."""
    run_id = manifest.name.removesuffix(MANIFEST_SUFFIX)
    for folder in (dest / "runs").glob(f"*/{run_id}"):
        if folder.resolve().is_relative_to(dest.resolve()):
            shutil.rmtree(folder)
    manifest.unlink()


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise InvalidInput(f"{source}: not found, so the excerpt cannot be made")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
