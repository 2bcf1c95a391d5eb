"""audit: re-verify signed manifests (signature twice, subjects, schemas, evidence rules).

Every check runs even after another failed, so an INVALID verdict lists every
reason at once (MLPerf style). Nothing outside the root is opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.contract.jsonio import parse_json
from harness.contract.schemas import DocumentError, validate_document
from harness.errors import InvalidInput
from harness.manifest import dsse
from harness.manifest.artifacts import check_subjects, check_unlisted
from harness.manifest.evidence import check_evidence
from harness.manifest.findings import Finding
from harness.manifest.image_provenance import image_provenance
from harness.manifest.predicate import PREDICATE_TYPE, STATEMENT_TYPE, fingerprint_summary
from harness.manifest.sign import KEYS_DIR, MANIFEST_SUFFIX, MANIFESTS_DIR
from harness.manifest.subjects import RootResolver, is_within, relative_name
from harness.manifest.trust import TrustedKeys, load_policy, load_trusted_keys, local_policy_path

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
FINGERPRINT_MARKER = "infkit/fingerprint/v1"


@dataclass(frozen=True)
class AuditConfig:
    root: Path = field(default_factory=Path.cwd)
    trusted_keys: tuple[Path, ...] = ()  # empty: every <root>/manifests/keys/*.pub.pem
    trust_policy: Path | None = None  # the key ids the auditor accepts (see harness.manifest.trust)
    excerpt: bool = False  # the root holds a run's published small files: absent subjects are held back


@dataclass(frozen=True)
class ManifestReport:
    manifest: str
    findings: tuple[Finding, ...]
    signer_keyid: str | None = None
    subjects: int = 0
    subjects_verified: int = 0
    predicate: dict[str, Any] | None = None
    trusted: bool = False  # signed by a key the auditor chose (trust policy, local policy or --trusted-key)
    # What a reader of the run may rely on: the signed sha256 of each subject, and the parsed
    # infkit documents whose bytes matched it (so a report shows exactly what was verified).
    subject_digests: dict[str, str] = field(default_factory=dict, repr=False)
    documents: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()  # what the audit noticed that is no verdict on this manifest
    provenance: tuple[str, ...] = ()  # one line per image: its verified build provenance, or "no provenance"
    held_back: tuple[str, ...] = ()  # an excerpt's subjects not present (signed, not published)

    @property
    def run_file(self) -> tuple[str, str] | None:
        """(subject name, signed sha256) of the run file the run was started from, when it names one."""
        entry = ((self.predicate or {}).get("requested") or {}).get("run_file")
        name = f"{(self.predicate or {}).get('run_dir')}/{entry.get('path')}" if isinstance(entry, dict) else None
        return (name, self.subject_digests[name]) if name in self.subject_digests else None

    @property
    def valid(self) -> bool:
        """Intact and by the rules (trusted or not): the exit status follows this."""
        return not self.findings

    @property
    def verdict(self) -> str:
        if self.findings:
            return "INVALID"
        return "VALID" if self.trusted else "VALID-UNTRUSTED"

    def to_dict(self) -> dict[str, Any]:
        p = self.predicate or {}
        return {
            "manifest": self.manifest,
            "verdict": self.verdict,
            "trusted": self.trusted,
            "reasons": [f.to_dict() for f in self.findings],
            "warnings": list(self.warnings),
            "signer_keyid": self.signer_keyid,
            "subjects": self.subjects,
            "subjects_verified": self.subjects_verified,
            "run": {k: p.get(k) for k in ("semantic_id", "run_id", "run_label", "evidence_level", "decision",
                                          "status", "run_dir")} if p else None,
            "harness": p.get("harness"),
            "images": p.get("images"),
            "fingerprint": p.get("fingerprint"),
            "provenance": list(self.provenance),
            "held_back": list(self.held_back),
            "run_file": dict(zip(("name", "sha256"), self.run_file, strict=True)) if self.run_file else None,
        }


def find_manifests(paths: list[str | os.PathLike]) -> list[Path]:
    """Files as given; directories expand to every ``*.intoto.json`` under them (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob(f"*{MANIFEST_SUFFIX}")) if p.is_dir() else [p])
    return out


def _read_envelope(path: Path) -> tuple[dsse.ParsedEnvelope | None, Finding | None]:
    try:
        if not path.is_file():
            return None, Finding("envelope", "no such file" if not path.exists() else "not a regular file")
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            return None, Finding("envelope", f"larger than {MAX_MANIFEST_BYTES // 2**20} MiB; not a manifest")
        return dsse.parse_envelope(path.read_bytes()), None
    except dsse.EnvelopeError as exc:
        return None, Finding("envelope", str(exc))
    except OSError as exc:
        return None, Finding("envelope", f"cannot read: {exc.strerror}")


def _signature_findings(envelope: dsse.ParsedEnvelope, trusted: TrustedKeys) -> tuple[str | None, list[Finding]]:
    if reason := trusted.unverifiable([keyid for keyid, _ in envelope.signatures]):
        return None, [Finding("signature", f"not verified: {reason}")]
    if not trusted.keys:
        return None, [Finding("signature", "not verified: no usable trusted key")]
    findings = []
    if reason := dsse.verify_sslib(envelope, trusted.keys):
        findings.append(Finding("signature", f"securesystemslib: {reason}"))
    signer, reason = dsse.verify_cryptography(envelope, trusted.keys)
    if reason:
        findings.append(Finding("signature", f"cryptography: {reason}"))
    return (signer if not findings else None), findings


def _statement(payload: bytes) -> tuple[dict[str, Any] | None, list[Finding]]:
    try:
        statement = parse_json(payload, "payload", expect=None)
    except DocumentError as exc:
        return None, [Finding("statement", f"the payload is not a JSON in-toto statement ({exc})")]
    if not isinstance(statement, dict):
        return None, [Finding("statement", "the payload is not a JSON object")]
    findings = []
    if statement.get("_type") != STATEMENT_TYPE:
        findings.append(Finding("statement", f"_type is {statement.get('_type')!r}, expected {STATEMENT_TYPE}"))
    if statement.get("predicateType") != PREDICATE_TYPE:
        findings.append(Finding("statement", f"predicateType is {statement.get('predicateType')!r}, "
                                             f"expected {PREDICATE_TYPE}"))
    return statement, findings


def _predicate(statement: dict[str, Any]) -> tuple[dict[str, Any] | None, list[Finding]]:
    predicate = statement.get("predicate")
    try:
        problems = validate_document(predicate)
    except DocumentError as exc:
        return None, [Finding("predicate", f"not an infkit predicate: {exc}")]
    if problems:
        return None, [Finding("predicate", str(p)) for p in problems]
    return predicate, []


def _fingerprint_is_subject(fp: dict[str, Any], subjects: Any) -> list[Finding]:
    signed = {s.get("name"): s.get("digest") for s in subjects or [] if isinstance(s, dict)}
    digest = signed.get(fp["path"])
    if isinstance(digest, dict) and f"sha256:{digest.get('sha256')}" == fp["sha256"]:
        return []
    return [Finding("predicate", f"fingerprint {fp['path']} is not a subject with the digest the predicate names")]


def _run_file_is_subject(predicate: dict[str, Any], subjects: Any) -> list[Finding]:
    """The run file run.json names (``requested.run_file``) is signed, with the digest recorded when it was read."""
    entry = (predicate.get("requested") or {}).get("run_file")
    if not isinstance(entry, dict):
        return []
    name = f"{predicate['run_dir']}/{entry.get('path')}"
    signed = {s.get("name"): s.get("digest") for s in subjects or [] if isinstance(s, dict)}
    digest = signed.get(name)
    if isinstance(digest, dict) and f"sha256:{digest.get('sha256')}" == entry.get("sha256"):
        return []
    return [Finding("predicate", f"run file {name} is not a subject with the digest run.json records")]


def _fingerprint_matches(predicate: dict[str, Any], documents: dict[str, dict[str, Any]]) -> list[Finding]:
    """The predicate's GPU, driver, host and harness revision, recomputed from the verified fingerprint.json."""
    fp = predicate["fingerprint"]
    doc = documents.get(fp["path"])
    if doc is None or doc.get("schema") != FINGERPRINT_MARKER:
        return [
            Finding(
                "predicate",
                f"fingerprint {fp['path']} is not a verified fingerprint document: the "
                "predicate's GPU, driver and harness revision cannot be checked",
                fp["path"],
            )
        ]
    findings = []
    recomputed = fingerprint_summary(doc, fp["path"], b"")
    for key in sorted(set(recomputed) - {"path", "sha256"}):
        if fp.get(key) != recomputed[key]:
            findings.append(
                Finding("predicate", f"predicate fingerprint.{key} differs from the signed {fp['path']}", fp["path"])
            )
    harness, recorded = predicate["harness"], doc.get("harness") or {}
    for key in ("version", "git_commit", "git_dirty"):
        if key in recorded and harness.get(key) != recorded[key]:
            findings.append(
                Finding("predicate", f"predicate harness.{key} differs from the signed {fp['path']}", fp["path"])
            )
    return findings


def _manifest_path_findings(path: Path, root_real: str, predicate: dict[str, Any]) -> list[Finding]:
    """Under ROOT/manifests/ a manifest's path names what it attests: <semantic_id>/<run_id>.intoto.json."""
    manifests_real = os.path.join(root_real, MANIFESTS_DIR)
    real = os.path.realpath(path)
    if not is_within(real, manifests_real):
        return []
    expected = f"{predicate['semantic_id']}/{predicate['run_id']}{MANIFEST_SUFFIX}"
    actual = relative_name(real, manifests_real)
    if actual == expected:
        return []
    return [
        Finding(
            "statement",
            f"the manifest is stored as {MANIFESTS_DIR}/{actual} but attests "
            f"{MANIFESTS_DIR}/{expected}: a manifest's path must name the run it signs",
        )
    ]


def duplicate_run_dirs(reports: list[ManifestReport], root: Path) -> list[ManifestReport]:
    """Add a finding to every manifest that names the same run directory as another one."""
    by_dir: dict[str, list[int]] = {}
    for i, report in enumerate(reports):
        run_dir = (report.predicate or {}).get("run_dir")
        if isinstance(run_dir, str):
            by_dir.setdefault(os.path.realpath(root / run_dir), []).append(i)
    out = list(reports)
    for indices in by_dir.values():
        if len(indices) < 2:
            continue
        names = [reports[i].manifest for i in indices]
        for i in indices:
            others = ", ".join(n for n in names if n != reports[i].manifest)
            run_dir = reports[i].predicate["run_dir"]
            finding = Finding(
                "statement", f"run directory {run_dir} is also named by {others}: one run has one manifest"
            )
            out[i] = replace(out[i], findings=(*out[i].findings, finding))
    return out


def _predicate_findings(predicate: dict[str, Any] | None, documents: dict[str, dict[str, Any]], subjects: Any,
                        path: Path, root: Path, trusted: TrustedKeys) -> tuple[list[Finding], list[str]]:
    """The evidence rules, the fingerprint and the manifest's place, and each image's provenance line."""
    if predicate is None:
        return [], []
    findings = check_evidence(predicate, documents)
    findings += _fingerprint_is_subject(predicate["fingerprint"], subjects)
    findings += _run_file_is_subject(predicate, subjects)
    findings += _fingerprint_matches(predicate, documents)
    findings += _manifest_path_findings(path, os.path.realpath(root), predicate)
    found, provenance = image_provenance(predicate["images"], Path(root), trusted, _signature_findings)
    return [*findings, *found], provenance


def audit_manifest(path: str | os.PathLike, root: Path, trusted: TrustedKeys, *,
                   excerpt: bool = False) -> ManifestReport:
    """Audit one manifest file against the files under ``root`` (an ``excerpt``: absent subjects held back)."""
    path = Path(path)
    findings: list[Finding] = list(trusted.findings)
    envelope, problem = _read_envelope(path)
    if envelope is None:
        return ManifestReport(str(path), (*findings, problem))
    signer, sig_findings = _signature_findings(envelope, trusted)
    findings += sig_findings
    if signer is not None:
        findings += trusted.trust_findings(signer)
    statement, stmt_findings = _statement(envelope.payload)
    findings += stmt_findings
    if statement is None:
        return ManifestReport(str(path), tuple(findings), signer, warnings=trusted.warnings)
    predicate, pred_findings = _predicate(statement)
    findings += pred_findings
    subjects = statement.get("subject")
    listed = subjects if isinstance(subjects, list) else []
    if signer is None:
        # Nothing an unauthenticated statement names is opened: its subject list could make the audit
        # hash one file through many names, or parse huge files, before anything vouched for it.
        findings.append(
            Finding("subjects-unchecked", f"the {len(listed)} subjects were not checked: the signature does not verify")
        )
        return ManifestReport(
            str(path), tuple(findings), None, len(listed), 0, predicate, False, warnings=trusted.warnings
        )
    root_real = os.path.realpath(root)
    resolver = RootResolver(root_real)
    audited = check_subjects(subjects, resolver, excerpt=excerpt)
    findings += audited.findings
    findings += check_unlisted(audited, (predicate or {}).get("run_dir"), resolver, os.path.realpath(path))
    found, provenance = _predicate_findings(predicate, audited.documents, subjects, path, root, trusted)
    findings += found
    digests = {
        s["name"]: s["digest"].get("sha256")
        for s in listed
        if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("digest"), dict)
    }
    return ManifestReport(
        str(path),
        tuple(findings),
        signer,
        len(listed),
        audited.verified,
        predicate,
        trusted.trusted(signer),
        digests,
        audited.documents,
        trusted.warnings,
        tuple(provenance),
        audited.held_back,
    )


def auditor_keys(config: AuditConfig) -> TrustedKeys:
    """The keys an audit with ``config`` verifies against, and the trust policy that names who may sign."""
    policy = load_policy(config.trust_policy) if config.trust_policy is not None else None
    local = None
    if policy is None and not config.trusted_keys and (path := local_policy_path()).is_file():
        local = load_policy(path)
    return load_trusted_keys(config.trusted_keys, config.root / MANIFESTS_DIR / KEYS_DIR, policy, local)


def audit_paths(paths: list[str | os.PathLike], config: AuditConfig) -> list[ManifestReport]:
    """Audit every manifest named (directories expand to their ``*.intoto.json``)."""
    manifests = find_manifests(paths)
    if not manifests:
        raise InvalidInput(f"no *{MANIFEST_SUFFIX} manifests under {', '.join(map(str, paths))}")
    trusted = auditor_keys(config)
    return duplicate_run_dirs([audit_manifest(m, config.root, trusted, excerpt=config.excerpt) for m in manifests],
                              config.root)
