"""Ed25519 signing keys: where the private key lives, key ids, published public keys.

The private key stays outside the repository: ``$INFKIT_SIGNING_KEY`` (a path)
wins, else ``$XDG_CONFIG_HOME/infkit/keys/signing-ed25519.pem`` or
``~/.config/infkit/keys/signing-ed25519.pem`` (mode 0600). CI may instead hand
the PEM text itself in ``$INFKIT_SIGNING_KEY_PEM``. The public key is published
as ``manifests/keys/<keyid>.pub.pem``; the key id is the hex sha256 of the
public key's DER SubjectPublicKeyInfo, so anyone can recompute it from the PEM.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from harness.contract.atomic import atomic_write_bytes
from harness.contract.paths import check_output_file
from harness.errors import InvalidInput

KEY_PATH_ENV = "INFKIT_SIGNING_KEY"
KEY_PEM_ENV = "INFKIT_SIGNING_KEY_PEM"
PRIVATE_KEY_NAME = "signing-ed25519.pem"
PUBLIC_KEY_SUFFIX = ".pub.pem"
MAX_PEM_BYTES = 64 * 1024


@dataclass(frozen=True)
class SigningKey:
    """A loaded private key and where it came from (a path, or the environment)."""

    private_key: Ed25519PrivateKey
    source: str

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def keyid(self) -> str:
        return key_id(self.public_key)


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/infkit``, else ``~/.config/infkit``: the user's own keys and trust policy."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "infkit"


def default_private_key_path() -> Path:
    if explicit := os.environ.get(KEY_PATH_ENV):
        return Path(explicit).expanduser()
    return config_dir() / "keys" / PRIVATE_KEY_NAME


def public_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(public_key: Ed25519PublicKey) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _read_pem(path: Path, what: str, *, private: bool = False) -> bytes:
    if not path.exists():
        raise InvalidInput(f"{what} {path}: no such file")
    if not path.is_file():
        raise InvalidInput(f"{what} {path}: not a regular file")
    info = path.stat()
    if info.st_size > MAX_PEM_BYTES:
        raise InvalidInput(f"{what} {path}: too large to be a PEM key")
    if private and info.st_mode & 0o077:
        # as ssh does: a key others can read is a key others may hold, one they can write may be theirs
        raise InvalidInput(f"{what} {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users read or write it",
                           hint=f"chmod 600 {path}")
    return path.read_bytes()


def _private_from_pem(data: bytes, source: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InvalidInput(f"private key {source} is encrypted; infkit expects an unencrypted PKCS#8 PEM") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidInput(f"private key {source}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInput(f"private key {source}: {type(key).__name__} is not an Ed25519 key")
    return key


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    """Load an Ed25519 public key PEM; a clear InvalidInput for anything else."""
    p = Path(path)
    data = _read_pem(p, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidInput(f"public key {p}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput(f"public key {p}: {type(key).__name__} is not an Ed25519 key")
    return key


def init_key(path: str | os.PathLike | None = None, *, force: bool = False, trust: bool | None = None) -> SigningKey:
    """Create an Ed25519 private key at ``path`` (default location when None), mode 0600.

    With ``trust`` (default: for the default key, the one ``infkit keys init`` makes) its key id
    joins the local trust policy (``trust.local_policy_path``) at creation, so the user's own
    runs audit VALID while a key found elsewhere does not.
    """
    trust = path is None if trust is None else trust
    target = check_output_file(Path(path) if path else default_private_key_path(), "private key")
    if target.exists() and not force:
        raise InvalidInput(
            f"a signing key already exists at {target}",
            hint="pass --force to replace it; manifests signed with the old key stay verifiable with its "
            "public key in manifests/keys/",
        )
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    private_key = Ed25519PrivateKey.generate()
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomic_write_bytes(target, pem, mode=0o600)
    key = SigningKey(private_key, str(target))
    if trust:
        from harness.manifest.trust import add_to_policy, local_policy_path

        add_to_policy(local_policy_path(), key.keyid, "this machine's signing key")
    return key


def load_signing_key(path: str | os.PathLike | None = None, *, create: bool = True) -> SigningKey:
    """The key to sign with: ``path`` if given, else ``$INFKIT_SIGNING_KEY_PEM``, else the default file.

    Only the default file is created when missing (``create``), so a fresh machine can sign at
    once; a key named explicitly must exist.
    """
    if path is not None:
        p = Path(path).expanduser()
        return SigningKey(_private_from_pem(_read_pem(p, "private key", private=True), str(p)), str(p))
    if pem := os.environ.get(KEY_PEM_ENV):
        return SigningKey(_private_from_pem(pem.encode(), f"${KEY_PEM_ENV}"), f"${KEY_PEM_ENV}")
    default = default_private_key_path()
    if not default.exists():
        if os.environ.get(KEY_PATH_ENV):
            raise InvalidInput(f"private key {default} (named by ${KEY_PATH_ENV}): no such file",
                               hint=f"a named key must exist: create it with `infkit keys init`, or unset "
                               f"{KEY_PATH_ENV} to use (and create) the default key")
        if not create:
            raise InvalidInput(f"no signing key at {default}", hint="run `infkit keys init` (or `make keys`)")
        return init_key(default, trust=True)
    return SigningKey(_private_from_pem(_read_pem(default, "private key", private=True), str(default)), str(default))


def publish_public_key(public_key: Ed25519PublicKey, keys_dir: str | os.PathLike) -> Path:
    """Write ``<keys_dir>/<keyid>.pub.pem`` (idempotent) and return its path."""
    target = Path(keys_dir) / f"{key_id(public_key)}{PUBLIC_KEY_SUFFIX}"
    pem = public_pem(public_key)
    if not (target.is_file() and target.read_bytes() == pem):
        atomic_write_bytes(target, pem)
    return target
