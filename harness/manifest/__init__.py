"""Signed run manifests: in-toto Statement v1 in a DSSE envelope, Ed25519 keys, and audit."""

from harness.manifest.keys import default_private_key_path, init_key, load_signing_key
from harness.manifest.predicate import PREDICATE_TYPE, STATEMENT_TYPE
from harness.manifest.sign import default_manifest_path, sign_run

__all__ = [
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "default_manifest_path",
    "default_private_key_path",
    "init_key",
    "load_signing_key",
    "sign_run",
]
