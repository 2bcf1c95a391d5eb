"""infkit audit PATH...: VALID or INVALID per signed manifest, with every reason."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.report import format_json, format_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="verify signed manifests: signature, subject digests, schemas, evidence rules",
        description="For each manifest (a directory means every *.intoto.json under it): verify the DSSE "
        "signature with securesystemslib and independently with cryptography, recompute every subject's "
        "sha256 under --root, report deleted and unlisted files, validate infkit documents and the "
        "evidence rules. Exit 0 only when every manifest is VALID.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--root", default=".", help="directory subject paths are relative to (default: .)")
    p.add_argument("--trusted-key", action="extend", nargs="+", default=[], metavar="PEM",
                   help="public key(s) to trust instead of the default, every ROOT/manifests/keys/*.pub.pem "
                   "(give PATHs before this option, or repeat it)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = AuditConfig(root=Path(args.root), trusted_keys=tuple(map(Path, args.trusted_key)))
    reports = audit_paths(args.paths, config)
    print(format_json(reports, str(config.root)) if args.json else format_text(reports))
    return 0 if all(r.valid for r in reports) else 1
