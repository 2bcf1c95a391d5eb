"""The audit's image check: the signed build provenance of every registry image a run used.

A run's predicate names each image by registry ref and manifest digest. Its provenance, when the
kit pushed it, lies at ``ROOT/images/provenance/<role>/<digest hex>.intoto.json`` (written by
``harness.images.provenance``). It is verified like a run's manifest: both signature paths, the
same trusted keys and trust policy; its subject must be that ref and digest. A bad or untrusted
provenance is a finding (INVALID); an image without one is reported as "no provenance".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.contract.jsonio import DocumentError, parse_json
from harness.manifest import dsse
from harness.manifest.findings import Finding
from harness.manifest.trust import TrustedKeys

SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# the audit's signature check: (envelope, keys) -> (verified signer or None, findings)
Verify = Callable[[dsse.ParsedEnvelope, TrustedKeys], tuple[str | None, list[Finding]]]


def _path(root: Path, image: dict[str, Any]) -> Path | None:
    """The provenance file for the image's digest (named by digest under its role's folder), if any."""
    found = sorted((root / "images" / "provenance").glob(f"*/{image['digest'].removeprefix('sha256:')}.intoto.json"))
    return found[0] if found else None


def _summary(statement: dict[str, Any]) -> str:
    deps = {d.get("name"): d for d in statement["predicate"]["buildDefinition"].get("resolvedDependencies", [])}
    names = ("dockerfile", "base", "dependency-lock", "wheelhouse")
    parts = [f"{name} sha256:{deps[name]['digest']['sha256'][:12]}" for name in names if name in deps]
    commit = deps.get("source", {}).get("digest", {}).get("gitCommit")
    return ", ".join(parts + ([f"revision {commit[:12]}"] if commit else []))


def _check_one(path: Path, image: dict[str, Any], trusted: TrustedKeys, verify: Verify) -> tuple[list[Finding], str]:
    where = str(path)
    try:
        envelope = dsse.parse_envelope(path.read_bytes())
    except (dsse.EnvelopeError, OSError) as exc:
        return [Finding("provenance", f"{image['role']}: unreadable provenance: {exc}", where)], "unreadable"
    signer, findings = verify(envelope, trusted)
    findings = [Finding("provenance", f"{image['role']}: {f.message}", where) for f in findings]
    if signer is not None:
        findings += [Finding("provenance", f"{image['role']}: {f.message}", where)
                     for f in trusted.trust_findings(signer)]
    try:
        statement = parse_json(envelope.payload, "provenance", expect=dict)
    except DocumentError as exc:
        return findings + [Finding("provenance", f"{image['role']}: {exc}", where)], "unreadable"
    subject = (statement.get("subject") or [{}])[0]
    wanted = {"name": image["ref"], "digest": {"sha256": image["digest"].removeprefix("sha256:")}}
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != SLSA_PREDICATE:
        findings.append(Finding("provenance", f"{image['role']}: not an in-toto SLSA provenance v1 statement", where))
    elif subject != wanted:
        findings.append(Finding("provenance", f"{image['role']}: its subject is {subject}, not {wanted}", where))
    if findings:
        return findings, "INVALID"
    key = f"signed by key {signer[:16]}" if signer else "signed"
    return [], f"{key}; {_summary(statement)}"


def image_provenance(images: list[dict[str, Any]], root: Path, trusted: TrustedKeys,
                     verify: Verify) -> tuple[list[Finding], list[str]]:
    """Findings, and one line per image: what its provenance says, or "no provenance"."""
    findings: list[Finding] = []
    lines: list[str] = []
    for image in images:
        if image.get("native") or not image.get("digest"):
            continue
        path = _path(root, image)
        if image.get("source") != "registry" or path is None:
            why = " (a local build)" if image.get("source") == "local build" else ""
            lines.append(f"{image['role']}: no provenance{why}")
            continue
        found, line = _check_one(path, image, trusted, verify)
        findings += found
        lines.append(f"{image['role']}: {line}")
    return findings, lines
