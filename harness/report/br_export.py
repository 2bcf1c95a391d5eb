"""``infkit report --format br0.2.1``: audited runs out as Benchmark Report v0.2.1 documents.

Every input is audited first, as for the page; only a VALID input is exported, from the
documents the audit verified. Each valid serving result of a run (BR has no field for validity,
so an invalid one is left out and named; a bench's unmeasured warm-ups under ``warmup/`` are not
results of the run) becomes one BR document at
``DIR/<run_id>/<the result's path in the run>.br0.2.1.json`` (``arms/<arm>/r<N>/result.json``
→ ``arms/<arm>/r<N>/result.br0.2.1.json``), validated against the vendored schema before
anything is written. The evidence (the manifest's sha256, the signer's key id, the result's
signed sha256) can only be known once the run is signed, so the export is made on request from
a signed run, never inside it. The folder is written and replaced as the page's is
(``write_report_folder``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_text, dumps_json
from harness.contract.result import Result
from harness.errors import InvalidInput, SchemaViolation
from harness.report.br import Evidence, br_document, br_problems, is_measured
from harness.report.build import ReportConfig, audit_config, check_inputs, write_report_folder
from harness.report.inputs import AuditedInput, audit_inputs

SUFFIX = ".br0.2.1.json"
WARMUP_DIR = "warmup/"  # a bench run's unmeasured warm-ups (docs/benches.md, the run directory): never exported


@dataclass(frozen=True)
class BrOutputs:
    out_dir: Path
    written: tuple[str, ...]  # BR files, relative to out_dir
    exported: tuple[str, ...]  # manifests of the runs exported
    skipped: tuple[str, ...]  # one line per input or result not exported, with its reason


def _invalid(result: Result) -> str | None:
    """Why a result may not be exported: BR has no field for validity, so an invalid one is left out."""
    if result.conclusion.valid:
        return None
    return result.conclusion.invalid_reasons[0] if result.conclusion.invalid_reasons else "invalid"


def _run_documents(item: AuditedInput) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(file name under the output folder, BR document) for every valid serving result of one VALID run, and
    one line for each serving result left out."""
    audit = item.audit
    assert audit is not None and audit.predicate is not None  # a VALID input has both
    run_dir, run_id = audit.predicate["run_dir"], audit.predicate["run_id"]
    manifest_sha256 = hashlib.sha256(Path(audit.manifest).read_bytes()).hexdigest()
    out, left_out = [], []
    for name, doc in sorted(audit.documents.items()):
        rel = name[len(run_dir) + 1:]
        if not (name.startswith(run_dir + "/") and is_measured(doc)) or rel.startswith(WARMUP_DIR):
            continue
        try:
            result = Result.from_dict(doc, name)
        except InvalidInput as exc:  # verified, yet not a result this version reads
            left_out.append(f"{exc.message}: not exported")
            continue
        if why := _invalid(result):
            left_out.append(f"{name}: an invalid result, not exported ({why})")
            continue
        evidence = Evidence(manifest_sha256, audit.signer_keyid, audit.subject_digests.get(name))
        br = br_document(result, uid=f"{run_id}/{rel}", eid=run_id, evidence=evidence)
        problems = br_problems(br)
        if problems:
            raise SchemaViolation(f"the BR0.2.1 document of {name} does not satisfy the vendored schema: "
                                  + "; ".join(problems[:5]), problems)
        out.append((f"{run_id}/{rel.removesuffix('.json')}{SUFFIX}", br))
    return out, left_out


def export_br(paths: list[str], config: ReportConfig) -> BrOutputs:
    """Audit ``paths`` and write one BR0.2.1 document per serving result of every VALID run."""
    out_dir = check_inputs(paths, config)
    documents: dict[str, dict[str, Any]] = {}
    exported, skipped = [], []
    for item in audit_inputs(paths, audit_config(config)):
        if not item.valid:
            reason = item.reasons[0].message if item.reasons else "not valid"
            skipped.append(f"{item.manifest or item.given}: INVALID, not exported ({reason})")
            continue
        found, left_out = _run_documents(item)
        skipped += left_out
        if not found and not left_out:
            skipped.append(f"{item.manifest}: no serving result (nothing BR0.2.1 has a field for)")
        documents.update(found)
        exported += [str(item.manifest)] if found else []

    def write(stage: Path) -> None:
        for name, doc in documents.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(stage / name, dumps_json(doc))

    write_report_folder(out_dir, write)
    return BrOutputs(out_dir, tuple(documents), tuple(exported), tuple(skipped))
