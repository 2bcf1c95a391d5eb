"""infkit sign RUN_DIR: write the signed manifest of a run directory."""

from __future__ import annotations

import argparse

from harness.manifest import sign_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sign",
        help="sign every file of a run directory into an in-toto/DSSE manifest",
        description="Write manifests/<semantic_id>/<run_id>.intoto.json: every file of RUN_DIR with its "
        "sha256 (paths relative to --root) and the run's predicate from run.json and fingerprint.json, "
        "signed with Ed25519. The default signing key is created on first use; a key named with --key "
        "or $INFKIT_SIGNING_KEY must exist.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--root", default=".", help="directory subject paths are relative to (default: .)")
    p.add_argument("--out", help="manifest path (default: ROOT/manifests/<semantic_id>/<run_id>.intoto.json)")
    p.add_argument("--key", help="private key PEM (default: $INFKIT_SIGNING_KEY_PEM, $INFKIT_SIGNING_KEY, "
                   "or the key in the user's config dir)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = sign_run(args.run_dir, root=args.root, out=args.out, key_path=args.key)
    print(path)
    return 0
