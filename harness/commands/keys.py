"""infkit keys init|show: the Ed25519 signing key and its published public key."""

from __future__ import annotations

import argparse

from harness.manifest.keys import init_key, load_signing_key, public_pem, publish_public_key
from harness.manifest.sign import KEYS_DIR, MANIFESTS_DIR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "keys",
        help="create or show the manifest signing key",
        description="The private key lives outside the repository ($INFKIT_SIGNING_KEY, else "
        "$XDG_CONFIG_HOME/infkit/keys/ or ~/.config/infkit/keys/, mode 0600); the public key is "
        "published as manifests/keys/<keyid>.pub.pem, keyid = sha256 of the public key (DER).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="create a new Ed25519 key pair")
    init.add_argument("--force", action="store_true", help="replace an existing private key")
    show = actions.add_parser("show", help="print the key id, key locations and the public key")
    for action in (init, show):
        action.add_argument("--root", default=".", help="where manifests/keys/ lives (default: .)")
        action.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    key = init_key(force=args.force) if args.action == "init" else load_signing_key(create=False)
    published = publish_public_key(key.public_key, f"{args.root}/{MANIFESTS_DIR}/{KEYS_DIR}")
    print(f"keyid        {key.keyid}")
    print(f"private key  {key.source}")
    print(f"public key   {published}")
    print(public_pem(key.public_key).decode().rstrip())
    return 0
