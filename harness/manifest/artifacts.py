"""Audit of the files a manifest names: path safety, presence, sha256, schemas, unlisted files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import harness.workload  # noqa: F401 - registers the workload file check, so a signed workload is checked as it loads
from harness.contract.jsonio import MAX_JSON_BYTES, DocumentError, parse_json
from harness.contract.schemas import validate_document, validate_file
from harness.manifest.findings import Finding
from harness.manifest.subjects import RootResolver, hash_file, is_within, relative_name, run_files

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
MARKER_PREFIX = "infkit/"


@dataclass(frozen=True)
class SubjectsAudit:
    findings: tuple[Finding, ...]
    documents: dict[str, dict[str, Any]]  # subject name -> parsed infkit document (verified digest only)
    verified: int
    names: frozenset[str] = frozenset()
    directories: frozenset[str] = frozenset()  # real folders holding a subject
    held_back: tuple[str, ...] = ()  # an excerpt's absent subjects: signed, not copied (never read, never judged)


def _wanted(raw: Any, index: int) -> tuple[str | None, str | None, Finding | None]:
    if not isinstance(raw, dict) or not isinstance(raw.get("digest"), dict):
        return None, None, Finding("statement", f"subject[{index}] is not {{name, digest}}")
    name, digest = raw.get("name"), raw["digest"].get("sha256")
    if not isinstance(digest, str) or not SHA256_HEX.match(digest):
        return None, None, Finding("statement", f"subject[{index}] {name!r} has no sha256 digest (64 hex digits)")
    return name, digest, None


_MARKER = re.compile(rb'"schema"\s*:\s*"infkit/')


def _infkit_doc(real: str, name: str, content: bytes | None) -> tuple[dict | None, list[Finding]]:
    """Parse a JSON/JSONL artifact; when it carries an infkit "schema" marker, validate it.

    Parsing is the strict one every reader uses: a file that looks like an infkit document but
    breaks it (NaN, an over-long integer, ...) is a finding, not a file quietly left unchecked.
    """
    try:
        if name.endswith(".jsonl"):
            head = _first_line(real)
            if len(head) > MAX_JSON_BYTES:
                return None, [_oversized(name, "its first line is")]
            doc = parse_json(head, name) if head else None
        else:
            head = content or b""
            doc = parse_json(content, name, expect=None) if content is not None else None
    except DocumentError as exc:
        looks_infkit = _MARKER.search(head[:65536]) is not None
        return None, [Finding("artifact-schema", str(exc), name)] if looks_infkit else []
    if not (isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"].startswith(MARKER_PREFIX)):
        return None, []
    try:
        problems = validate_file(real) if name.endswith(".jsonl") else validate_document(doc)
    except DocumentError as exc:
        return None, [Finding("artifact-schema", f"{name}: {exc}", name)]
    if problems:
        return None, [Finding("artifact-schema", f"{name}: {p}", name) for p in problems]
    return doc, []


def _first_line(real: str) -> bytes:
    """The first non-blank line of a JSON Lines file, read at most one line limit (+1) at a time."""
    with open(real, "rb") as fh:
        while line := fh.readline(MAX_JSON_BYTES + 1):
            if line.strip() or len(line) > MAX_JSON_BYTES:
                return line
    return b""


def _oversized(name: str, what: str = "it is") -> Finding:
    return Finding("artifact-size", f"{name}: {what} larger than {MAX_JSON_BYTES >> 20} MiB, the limit of one "
                   "JSON document: not parsed, so not checked", name)


class _MissingFolders:
    """Groups deleted subjects by the outermost missing folder, so a removed run directory of
    10,000 files is one reason, not 10,000."""

    def __init__(self, root_real: str):
        self.root_real = root_real
        self._outermost: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}

    def outermost_missing(self, folder: str) -> str | None:
        if folder not in self._outermost:
            missing = None
            probe = folder
            while is_within(probe, self.root_real) and probe != self.root_real and not os.path.isdir(probe):
                missing, probe = probe, os.path.dirname(probe)
            self._outermost[folder] = missing
        return self._outermost[folder]

    def add(self, folder: str) -> None:
        self.counts[folder] = self.counts.get(folder, 0) + 1

    def findings(self) -> list[Finding]:
        out = []
        for folder, count in sorted(self.counts.items()):
            name = relative_name(folder, self.root_real)
            files = f"{count} listed file{'s' if count > 1 else ''}"
            out.append(Finding("subject-deleted", f"deleted: folder {name} is gone, with its {files}", name))
        return out


def _identity(real: str, name: str) -> tuple[int, int, str]:
    """The file behind a name (device, inode) and how its name says to read it."""
    info = os.stat(real)
    return info.st_dev, info.st_ino, os.path.splitext(name)[1] if name.endswith((".json", ".jsonl")) else ""


def _read_subject(real: str, name: str) -> tuple[str, dict | None, list[Finding]]:
    """(sha256, the infkit document it holds, its problems), the file read once and streamed."""
    is_json = name.endswith((".json", ".jsonl"))
    actual, content = hash_file(real, keep_bytes=MAX_JSON_BYTES if is_json else 0)
    if name.endswith(".json") and content is None:
        return actual, None, [_oversized(name)]
    if not is_json:
        return actual, None, []
    doc, problems = _infkit_doc(real, name, content)
    return actual, doc, problems


def check_subjects(subjects: Any, resolver: RootResolver, *, excerpt: bool = False) -> SubjectsAudit:
    """Recompute every subject's sha256 (refusing unsafe names unread) and validate infkit documents. In an
    ``excerpt`` (a run's small files published apart from the rest) an absent subject is held back, not deleted:
    what is present must match its signed digest all the same."""
    if not isinstance(subjects, list) or not subjects:
        return SubjectsAudit((Finding("statement", "the statement lists no subjects"),), {}, 0)
    findings: list[Finding] = []
    documents: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    directories: set[str] = set()
    missing = _MissingFolders(resolver.root_real)
    seen_files: dict[tuple[int, int, str], tuple[str, dict | None, list[Finding]]] = {}
    verified = 0
    held_back: list[str] = []
    for index, raw in enumerate(subjects):
        name, expected, problem = _wanted(raw, index)
        if problem:
            findings.append(problem)
            continue
        real, reason = resolver.resolve(name)
        if real is None:
            findings.append(Finding("subject-path", f"subject {name!r} {reason}; not read", str(name)))
            continue
        if name in seen:
            findings.append(Finding("statement", f"subject {name} is listed twice", name))
            continue
        seen.add(name)
        directories.add(os.path.dirname(real))
        if excerpt and not os.path.lexists(real):
            held_back.append(name)
            continue
        if not os.path.lexists(real):
            if folder := missing.outermost_missing(os.path.dirname(real)):
                missing.add(folder)
                continue
            findings.append(Finding("subject-deleted", f"deleted: {name} is in the manifest but not on disk", name))
            continue
        if not os.path.isfile(real):
            findings.append(Finding("subject-deleted", f"{name} is no longer a regular file", name))
            continue
        identity = _identity(real, name)
        if identity not in seen_files:  # one file under several names (a loop of links) is read once
            seen_files[identity] = _read_subject(real, name)
        actual, doc, problems = seen_files[identity]
        if actual != expected:
            findings.append(
                Finding(
                    "subject-digest",
                    f"modified: {name}: sha256 {actual[:16]}… differs from the signed {expected[:16]}…",
                    name,
                )
            )
            continue
        verified += 1
        findings.extend(problems)
        if doc is not None:
            documents[name] = doc
    findings += missing.findings()
    return SubjectsAudit(tuple(findings), documents, verified, frozenset(seen), frozenset(directories),
                         tuple(held_back))


def check_unlisted(audited: SubjectsAudit, run_dir: Any, resolver: RootResolver, manifest_real: str) -> list[Finding]:
    """Files present in the run directory (recursively) or beside any subject but not signed."""
    root_real = resolver.root_real
    directories = dict.fromkeys(audited.directories, False)  # real folder -> recurse
    findings = []
    if isinstance(run_dir, str):
        real, reason = resolver.resolve(run_dir)
        if real is None:
            findings.append(Finding("subject-path", f"run_dir {run_dir!r} {reason}; not read", run_dir))
        elif os.path.isdir(real):
            directories[real] = True
    names = set(audited.names)
    for directory, recurse in sorted(directories.items()):
        if not os.path.isdir(directory) or not is_within(directory, root_real):
            continue
        for path, problem in run_files(directory, root_real, recursive=recurse):
            name = relative_name(path, root_real)
            if name in names or os.path.realpath(path) == manifest_real:
                continue
            names.add(name)  # report once even when two walks reach it
            if problem is None:
                findings.append(Finding("unlisted-file", f"added: {name} is not in the manifest", name))
            else:
                findings.append(Finding("unlisted-file", f"added: {name} {problem}; not read", name))
    return findings
