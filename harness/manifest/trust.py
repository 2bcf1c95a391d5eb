"""Who may sign: the public keys an audit verifies with, and the trust policy that says which count.

A signature proves that the holder of a private key signed the files; it says nothing about
who that is. ``audit`` verifies with the public keys it finds — ``--trusted-key`` files, else
every ``ROOT/manifests/keys/*.pub.pem`` — and decides trust separately:

- ``--trust FILE`` (schema ``infkit/trust-policy/v1``) names the accepted key ids. A key id is
  the sha256 of the public key, so it pins one exact key: a key someone adds to the repository
  is not in the auditor's policy, and its manifests are INVALID (check ``trust``).
- ``--trusted-key PEM`` is also an explicit decision: the auditor handed over the key.
- Otherwise the local trust policy (``local_policy_path``: ``$INFKIT_TRUST_POLICY``, else
  ``$XDG_CONFIG_HOME/infkit/trust.json``), to which ``infkit keys init`` adds the key it creates,
  decides: a signer it lists is trusted (VALID); any other signer, with its key taken from the
  repository being audited, proves integrity only (the files are what that key signed): such a
  manifest is VALID-UNTRUSTED, never plain VALID, and ``audit`` exits with its own status.

An entry of ``manifests/keys/`` that is not a usable key is a warning, never a verdict on the
manifests (a stray file there must not make every run INVALID); a key file passed with
``--trusted-key`` that is unusable is still a finding (the auditor asked for it).

A published key file must be named ``<keyid>.pub.pem`` after the key it holds; a file whose
name and key disagree is refused (a ``key`` finding), so a name cannot pass for another key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_json
from harness.contract.jsonio import read_json
from harness.contract.paths import check_output_file
from harness.contract.schemas import DocumentError, validate_document
from harness.errors import InvalidInput
from harness.manifest.findings import Finding
from harness.manifest.keys import PUBLIC_KEY_SUFFIX, config_dir, key_id, load_public_key

TRUST_SCHEMA = "infkit/trust-policy/v1"
KEYID = re.compile(r"^[0-9a-f]{64}$")
TRUST_POLICY_ENV = "INFKIT_TRUST_POLICY"
LOCAL_POLICY_NAME = "trust.json"


def local_policy_path() -> Path:
    """The user's own trust policy: ``$INFKIT_TRUST_POLICY``, else ``<config dir>/trust.json``."""
    if explicit := os.environ.get(TRUST_POLICY_ENV):
        return Path(explicit).expanduser()
    return config_dir() / LOCAL_POLICY_NAME


@dataclass(frozen=True)
class TrustPolicy:
    """The key ids an auditor accepts, and who holds each (when the policy says)."""

    path: Path
    owners: dict[str, str | None]  # keyid -> owner

    def lists(self, keyid: str) -> bool:
        return keyid in self.owners


def load_policy(path: str | os.PathLike) -> TrustPolicy:
    """Read and check a trust policy; anything wrong is a one-line InvalidInput."""
    p = Path(path)
    doc = read_json(p)
    try:
        problems = validate_document(doc)
    except DocumentError as exc:
        raise InvalidInput(f"trust policy {p}: {exc}", hint=f'a trust policy is {{"schema": "{TRUST_SCHEMA}", '
                           '"keys": [{"keyid": "<64 hex>", "owner": "..."}]}') from None
    if doc.get("schema") != TRUST_SCHEMA:
        raise InvalidInput(f"trust policy {p}: a {doc.get('schema')!r} document, not a trust policy ({TRUST_SCHEMA})")
    if problems:
        raise InvalidInput(f"trust policy {p}: not valid: {problems[0]}")
    return TrustPolicy(p, {k["keyid"]: k.get("owner") for k in doc["keys"]})


def add_to_policy(path: str | os.PathLike, keyid: str, owner: str | None = None) -> Path:
    """Add ``keyid`` to the policy at ``path`` (created when missing); idempotent."""
    if not KEYID.match(keyid):
        raise InvalidInput(f"key id {keyid!r}: expected 64 lowercase hex digits (see `infkit keys show`)")
    p = check_output_file(path, "trust policy")
    doc: dict[str, Any] = {"schema": TRUST_SCHEMA, "keys": []}
    if p.exists():
        load_policy(p)  # refuse to extend a file that is not a valid policy
        doc = read_json(p)
    entry = {"keyid": keyid, **({"owner": owner} if owner else {})}
    doc["keys"] = [k for k in doc["keys"] if k["keyid"] != keyid] + [entry]
    return atomic_write_json(p, doc)


@dataclass(frozen=True)
class TrustedKeys:
    """The keys signatures are verified with, what was wrong with the others, and how trust is decided."""

    keys: dict[str, Any]  # keyid -> Ed25519PublicKey
    findings: tuple[Finding, ...]
    policy: TrustPolicy | None = None
    explicit: bool = False  # the keys were handed over with --trusted-key
    source: str = ""
    missing: frozenset[str] = field(default_factory=frozenset)  # policy key ids without a public key here
    local: TrustPolicy | None = None  # the user's own policy, used when no --trust/--trusted-key is given
    warnings: tuple[str, ...] = ()  # key-directory entries that are not usable keys (never a verdict)

    def trust_findings(self, signer: str) -> list[Finding]:
        """A ``trust`` finding when a policy is given and does not list the (verified) signer."""
        if self.policy is None or self.policy.lists(signer):
            return []
        return [Finding("trust", f"signed by key {signer[:16]}..., which the trust policy {self.policy.path} "
                        "does not list")]

    def trusted(self, signer: str | None) -> bool:
        """Whether a verified signer is trusted by the auditor's own decision (policy or given keys)."""
        if signer is None:
            return False
        if self.policy is not None:
            return self.policy.lists(signer)
        return self.explicit or (self.local is not None and self.local.lists(signer))

    def unverifiable(self, keyids: list[str]) -> str | None:
        """Why a signature by one of ``keyids`` could not be checked, when the policy lists it but no key is here."""
        listed = [k for k in keyids if k in self.missing]
        if not listed:
            return None
        return f"the trust policy lists key {listed[0][:16]}..., but no public key file for it is in {self.source}"


def _key_file(path: Path, keys: dict[str, Any], named: bool) -> str | None:
    """Add the key in ``path`` to ``keys``, or say why it is not used."""
    try:
        public = load_public_key(path)
    except InvalidInput as exc:
        return f"trusted key unusable: {exc}"
    kid = key_id(public)
    stem = path.name.removesuffix(PUBLIC_KEY_SUFFIX)
    if (named or KEYID.match(stem)) and stem != kid:
        return (f"{path} holds key {kid[:16]}...; a published key file is named after the key it holds "
                f"({kid}{PUBLIC_KEY_SUFFIX}), so it is not used")
    keys[kid] = public
    return None


def load_trusted_keys(given: tuple[Path, ...], keys_dir: Path, policy: TrustPolicy | None,
                      local: TrustPolicy | None = None) -> TrustedKeys:
    """Public keys from ``given`` (``--trusted-key``), else every ``keys_dir/*.pub.pem``; see the module doc."""
    paths = list(given) or sorted(keys_dir.glob(f"*{PUBLIC_KEY_SUFFIX}"))
    keys: dict[str, Any] = {}
    findings: list[Finding] = []
    warnings: list[str] = []
    for path in paths:
        if (reason := _key_file(path, keys, named=not given)) is None:
            continue
        if given:
            findings.append(Finding("key", reason, str(path)))
        else:
            warnings.append(f"{reason} (a stray entry of {keys_dir}; left out)")
    if not paths:
        findings.append(Finding("key", f"no trusted public key: none given with --trusted-key and none in {keys_dir}"))
    source = "the keys given with --trusted-key" if given else str(keys_dir)
    missing = frozenset(k for k in policy.owners if k not in keys) if policy else frozenset()
    local = local if policy is None and not given else None
    return TrustedKeys(keys, tuple(findings), policy, bool(given), source, missing, local, tuple(warnings))
