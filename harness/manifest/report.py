"""Audit output: a summary for people, one JSON document for machines."""

from __future__ import annotations

import json
from typing import Any

from harness.manifest.audit import ManifestReport


def _image_line(image: dict[str, Any]) -> str:
    if image.get("native"):
        python = f" python {image['python']}" if image.get("python") else ""
        return f"{image['role']}: native{python}, package list {image['packages_sha256']}"
    base = f" (base substituted: {image['base_substituted']})" if image.get("base_substituted") else ""
    return f"{image['role']}: {image['ref']}@{image['digest']}{base}"


def _gpu_line(fp: dict[str, Any]) -> str:
    if not fp["gpus"]:
        return f"none ({fp['gpus_absent_reason'] or 'no GPU recorded'})"
    names = ", ".join(g["name"] for g in fp["gpus"])
    return f"{names}; driver {fp['driver_version'] or 'unknown'}, CUDA driver {fp.get('cuda_driver_version') or 'unknown'}"


def _details(report: ManifestReport) -> list[str]:
    p = report.predicate
    if p is None:
        return []
    harness = p["harness"]
    dirty = {True: "dirty tree", False: "clean", None: "dirty flag unknown"}[harness["git_dirty"]]
    lines = [
        f"  run      {p['semantic_id']} {p['run_id']} {p['run_label']!r}: {p['evidence_level']} evidence, "
        f"decision {p['decision']} ({p['status']})",
        f"  subjects {report.subjects_verified}/{report.subjects} verified under {p['run_dir']}"
        + (f", signed by key {report.signer_keyid[:16]}" if report.signer_keyid else ""),
        f"  harness  {harness['version']} at {(harness['git_commit'] or 'no git')[:12]} ({dirty})",
    ]
    lines += [f"  image    {_image_line(i)}" for i in p["images"]] or ["  image    none recorded"]
    lines.append(f"  gpu      {_gpu_line(p['fingerprint'])}")
    return lines


def format_text(reports: list[ManifestReport]) -> str:
    lines = []
    for report in reports:
        if report.valid:
            lines.append(f"{report.manifest}: VALID")
        else:
            count = len(report.findings)
            lines.append(f"{report.manifest}: INVALID ({count} reason{'s' if count > 1 else ''})")
            lines += [f"  - {f}" for f in report.findings]
        lines += _details(report)
    valid = sum(r.valid for r in reports)
    lines.append(f"{len(reports)} manifest{'s' if len(reports) != 1 else ''}: {valid} VALID, {len(reports) - valid} INVALID")
    return "\n".join(lines)


def format_json(reports: list[ManifestReport], root: str) -> str:
    doc = {
        "root": root,
        "valid": all(r.valid for r in reports),
        "manifests": [r.to_dict() for r in reports],
    }
    return json.dumps(doc, indent=2)
