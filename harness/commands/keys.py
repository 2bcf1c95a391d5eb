"""infkit keys init|show|trust: the Ed25519 signing key, its published public key, and trust policies."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.contract.paths import check_output_dir
from harness.errors import InvalidInput
from harness.manifest.keys import (
    init_key,
    key_id,
    load_public_key,
    load_signing_key,
    public_pem,
    publish_public_key,
)
from harness.manifest.sign import KEYS_DIR, MANIFESTS_DIR
from harness.manifest.trust import add_to_policy, local_policy_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "keys",
        help="create or show the manifest signing key; add a key to a trust policy",
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
    trust = actions.add_parser(
        "trust", help="add a key id to a trust policy file (created when missing) for `audit --trust`",
        description="Keep the policy where you, the auditor, decide (not in the repository you audit). "
        "Without FILE: the local trust policy `audit` uses by default ($INFKIT_TRUST_POLICY, else "
        "$XDG_CONFIG_HOME/infkit/trust.json), to which `keys init` adds the key it creates.")
    trust.add_argument("policy", metavar="FILE", nargs="?", help="the policy (default: the local trust policy)")
    trust.add_argument("--public-key", metavar="PEM", help="the key to trust (default: this machine's signing key)")
    trust.add_argument("--owner", help="who holds the private key")
    trust.set_defaults(func=run_trust)


def run(args: argparse.Namespace) -> int:
    keys_dir = check_output_dir(Path(args.root) / MANIFESTS_DIR / KEYS_DIR, "--root")
    key = init_key(force=args.force) if args.action == "init" else load_signing_key(create=False)
    published = publish_public_key(key.public_key, keys_dir)
    print(f"keyid        {key.keyid}")
    print(f"private key  {key.source}")
    print(f"public key   {published}")
    if args.action == "init":
        print(f"trusted in   {local_policy_path()} (the local trust policy `infkit audit` uses)")
    print(public_pem(key.public_key).decode().rstrip())
    return 0


def run_trust(args: argparse.Namespace) -> int:
    for what, value in (("FILE", args.policy), ("--public-key", args.public_key), ("--owner", args.owner)):
        if value is not None and not value.strip():  # an empty value would silently mean the default
            raise InvalidInput(f"keys trust: {what} is empty", hint=f"leave {what} out for its default")
    public = load_public_key(args.public_key) if args.public_key else load_signing_key(create=False).public_key
    keyid = key_id(public)
    path = add_to_policy(args.policy or local_policy_path(), keyid, args.owner)
    print(f"{path}: trusts key {keyid}")
    return 0
