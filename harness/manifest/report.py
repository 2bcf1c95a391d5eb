"""Audit output: a summary for people, one JSON document for machines, and the exit status.

Every line of the summary passes through ``terminal_safe``: file names, subject names and
predicate fields come from the audited files, and a control sequence among them could move
the cursor, recolour or erase an INVALID line on the auditor's terminal.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.manifest.audit import ManifestReport

EXIT_VALID = 0  # every manifest intact, by the rules, and signed by a key the auditor trusts
EXIT_INVALID = 1  # some manifest is INVALID
EXIT_UNTRUSTED = 4  # none INVALID, but some signer is not trusted (VALID-UNTRUSTED): integrity only
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character (ESC, CR, newline, C1, bidi overrides) shown as an escape."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def exit_status(reports: list[ManifestReport], *, allow_untrusted: bool = False) -> int:
    """0 when every manifest is VALID, 1 when any is INVALID, else 4 for an untrusted signer (see above)."""
    if not all(r.valid for r in reports):
        return EXIT_INVALID
    if allow_untrusted or all(r.trusted for r in reports):
        return EXIT_VALID
    return EXIT_UNTRUSTED


def _image_line(image: dict[str, Any]) -> str:
    if image.get("native"):
        python = f" python {image['python']}" if image.get("python") else ""
        return f"{image['role']}: native{python}, package list {image['packages_sha256']}"
    base = f" (base substituted: {image['base_substituted']})" if image.get("base_substituted") else ""
    source = f" (from the {image['source']})" if image.get("source") == "registry" else (
        " (built locally)" if image.get("source") else "")
    return f"{image['role']}: {image['ref']}@{image['digest']}{source}{base}"


def _gpu_line(fp: dict[str, Any]) -> str:
    if not fp["gpus"]:
        return f"none ({fp['gpus_absent_reason'] or 'no GPU recorded'})"
    names = ", ".join(g["name"] for g in fp["gpus"])
    return (
        f"{names}; driver {fp['driver_version'] or 'unknown'}, CUDA driver {fp.get('cuda_driver_version') or 'unknown'}"
    )


def _trust_line(report: ManifestReport) -> str | None:
    if report.signer_keyid is None:
        return None
    key = report.signer_keyid[:16]
    if report.trusted:
        return f"  trust    signer {key}... is one the auditor trusts (trust policy, local policy or --trusted-key)"
    return (
        f"  trust    signer {key}... was found in the audited repository, not pinned by a trust policy: integrity only"
    )


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
        + (f", {len(report.held_back)} held back (an excerpt: signed, not published)" if report.held_back else "")
        + (f", signed by key {report.signer_keyid[:16]}" if report.signer_keyid else ""),
        f"  harness  {harness['version']} at {(harness['git_commit'] or 'no git')[:12]} ({dirty})",
    ]
    lines += [f"  image    {_image_line(i)}" for i in p["images"]] or ["  image    none recorded"]
    lines += [f"  provenance {line}" for line in report.provenance]
    lines.append(f"  gpu      {_gpu_line(p['fingerprint'])}")
    if report.run_file:
        lines.append(f"  run file {report.run_file[0]} sha256:{report.run_file[1]} (signed)")
    if trust := _trust_line(report):
        lines.append(trust)
    return lines


UNTRUSTED_NOTE = (
    "VALID-UNTRUSTED: the files are intact and what the signing key signed, but that key was taken "
    "from the audited repository, which anyone who can write to it can add to, and no trust policy "
    "lists it; pass one (--trust FILE, make audit TRUST=FILE) or add the key to yours "
    f"(infkit keys trust --public-key PEM) to check who signed (exit status {EXIT_UNTRUSTED})"
)


def format_text(reports: list[ManifestReport]) -> str:
    lines = [f"warning: {w}" for w in dict.fromkeys(w for r in reports for w in r.warnings)]
    for report in reports:
        if report.findings:
            count = len(report.findings)
            lines.append(f"{report.manifest}: INVALID ({count} reason{'s' if count > 1 else ''})")
            lines += [f"  - {f}" for f in report.findings]
        else:
            lines.append(f"{report.manifest}: {report.verdict}")
        lines += _details(report)
    counts = {v: sum(r.verdict == v for r in reports) for v in ("VALID", "VALID-UNTRUSTED", "INVALID")}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n or v != "VALID-UNTRUSTED")
    lines.append(f"{len(reports)} manifest{'s' if len(reports) != 1 else ''}: {summary}")
    if counts["VALID-UNTRUSTED"]:
        lines.append(UNTRUSTED_NOTE)
    return "\n".join(map(terminal_safe, lines))


def format_json(reports: list[ManifestReport], root: str, policy: str | None = None) -> str:
    doc = {
        "root": root,
        "valid": all(r.valid for r in reports),
        "trusted": all(r.trusted for r in reports),
        "exit_status": exit_status(reports),
        "trust_policy": policy,
        "manifests": [r.to_dict() for r in reports],
    }
    return json.dumps(doc, indent=2)
