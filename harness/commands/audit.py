"""infkit audit PATH...: VALID, VALID-UNTRUSTED or INVALID per signed manifest, with every reason."""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.report import (
    EXIT_INVALID,
    EXIT_UNTRUSTED,
    exit_status,
    format_json,
    format_text,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="verify signed manifests: signature, subject digests, schemas, evidence rules",
        description="For each manifest (a directory means every *.intoto.json under it): verify the DSSE "
        "signature with securesystemslib and independently with cryptography, recompute every subject's "
        "sha256 under --root, report deleted, unlisted and non-regular files, validate infkit documents and "
        "the evidence rules, and decide trust: with --trust FILE a signer the policy does not list is INVALID; "
        "otherwise the local trust policy (which `infkit keys init` adds its key to) decides, and an intact "
        "manifest by a signer it does not list is VALID-UNTRUSTED, integrity only. Exit 0 when every manifest "
        f"is VALID (intact and trusted), {EXIT_INVALID} when any is INVALID, {EXIT_UNTRUSTED} when none is "
        "INVALID but some signer is not trusted.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--root", default=".", help="directory subject paths are relative to (default: .)")
    p.add_argument("--trusted-key", action="extend", nargs="+", default=[], metavar="PEM",
                   help="public key(s) to trust instead of the default, every ROOT/manifests/keys/*.pub.pem "
                   "(give PATHs before this option, or repeat it)")
    p.add_argument("--trust", metavar="FILE", help="trust policy naming the accepted signing key ids "
                   "(schema infkit/trust-policy/v1; create one with `infkit keys trust FILE`)")
    p.add_argument("--excerpt", action="store_true",
                   help="ROOT holds a run's published small files (infkit excerpt): a subject that is absent is held "
                   "back, not deleted; every subject present is verified as usual")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    p.add_argument("--allow-untrusted", action="store_true",
                   help=f"exit 0, not {EXIT_UNTRUSTED}, when intact manifests are signed by untrusted keys")
    p.set_defaults(func=run)


def check_name(text: str, flag: str) -> None:
    """A path the file system cannot even look up (a name or path over its limit) is bad input, not a crash."""
    try:
        os.lstat(text)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            shown = text if len(text) <= 80 else f"{text[:40]}...{text[-20:]} ({len(text)} characters)"
            raise InvalidInput(f"{flag}{shown}: {os.strerror(exc.errno)}",
                               hint="a name is at most 255 bytes, a path 4096") from None


def run(args: argparse.Namespace) -> int:
    check_name(args.root, "--root ")
    for path in args.paths:
        check_name(path, "")
    config = AuditConfig(root=Path(args.root), trusted_keys=tuple(map(Path, args.trusted_key)),
                         trust_policy=Path(args.trust) if args.trust else None, excerpt=args.excerpt)
    reports = audit_paths(args.paths, config)
    print(format_json(reports, str(config.root), args.trust) if args.json else format_text(reports))
    return exit_status(reports, allow_untrusted=args.allow_untrusted)
