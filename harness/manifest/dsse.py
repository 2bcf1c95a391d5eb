"""DSSE envelopes: sign with securesystemslib, verify twice.

Verification runs two independent paths that must both accept:

1. securesystemslib's ``Envelope.verify`` (its own base64 decoding, PAE and key handling);
2. this module's own parse (strict base64), own PAE and a direct
   ``cryptography`` Ed25519 verify.

A bug or bypass in one path cannot make a forged envelope pass on its own.
PAE (DSSE v1): ``"DSSEv1" SP len(type) SP type SP len(body) SP body``.
"""

from __future__ import annotations

import base64
import binascii
import copy
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from harness.contract.jsonio import DocumentError, parse_json
from harness.manifest.keys import SigningKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"


class EnvelopeError(ValueError):
    """The envelope cannot be read (not JSON, wrong shape, bad base64, wrong payloadType)."""


@dataclass(frozen=True)
class ParsedEnvelope:
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, raw signature bytes)
    raw: dict[str, Any]


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{what} is not valid base64 (truncated or corrupted)") from None


def parse_envelope(data: bytes) -> ParsedEnvelope:
    """Parse envelope bytes; every malformed case raises EnvelopeError with the reason."""
    if not data.strip():
        raise EnvelopeError("not a JSON document (empty file)")
    try:
        raw = parse_json(data, "envelope", expect=None)
    except DocumentError as exc:
        raise EnvelopeError(f"not a JSON document ({str(exc).removeprefix('envelope: ')})") from None
    if not isinstance(raw, dict):
        raise EnvelopeError(f"not a DSSE envelope (a JSON {type(raw).__name__}, expected an object)")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in raw]
    if missing:
        raise EnvelopeError(f"not a DSSE envelope (missing {', '.join(missing)})")
    if raw["payloadType"] != PAYLOAD_TYPE:
        raise EnvelopeError(f"payloadType is {raw['payloadType']!r}, expected {PAYLOAD_TYPE!r}")
    payload = _b64(raw["payload"], "payload")
    sigs = raw["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise EnvelopeError("envelope carries no signatures")
    parsed = []
    for i, sig in enumerate(sigs):
        if not isinstance(sig, dict) or "sig" not in sig:
            raise EnvelopeError(f"signatures[{i}] has no 'sig'")
        keyid = sig.get("keyid", "")
        if not isinstance(keyid, str):
            raise EnvelopeError(f"signatures[{i}].keyid is not a string")
        parsed.append((keyid, _b64(sig["sig"], f"signatures[{i}].sig")))
    return ParsedEnvelope(PAYLOAD_TYPE, payload, tuple(parsed), raw)


def sign_payload(payload: bytes, key: SigningKey) -> dict[str, Any]:
    """A DSSE envelope (as a dict) over ``payload``, signed by ``key`` via securesystemslib."""
    public = SSlibKey.from_crypto(key.public_key, keyid=key.keyid)
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(key.private_key, public))
    return envelope.to_dict()


def verify_sslib(envelope: ParsedEnvelope, trusted: dict[str, Ed25519PublicKey]) -> str | None:
    """securesystemslib check. Returns None when a trusted key verifies, else the reason."""
    keys = [SSlibKey.from_crypto(pub, keyid=kid) for kid, pub in trusted.items()]
    try:
        # from_dict rewrites the signature dicts in place: hand it a copy.
        accepted = Envelope.from_dict(copy.deepcopy(envelope.raw)).verify(keys, 1)
    except Exception as exc:  # securesystemslib raises several types; all mean "not verified"
        return f"securesystemslib rejected the signature: {exc}"
    if not set(accepted) & set(trusted):
        return "securesystemslib accepted no trusted key"
    return None


def verify_cryptography(
    envelope: ParsedEnvelope, trusted: dict[str, Ed25519PublicKey]
) -> tuple[str | None, str | None]:
    """Independent check: own PAE, direct Ed25519 verify. Returns (verifying keyid, reason)."""
    message = pae(envelope.payload_type, envelope.payload)
    for keyid, signature in envelope.signatures:
        candidates = [keyid] if keyid in trusted else ([] if keyid else list(trusted))
        for kid in candidates:
            try:
                trusted[kid].verify(signature, message)
            except InvalidSignature:
                continue
            return kid, None
    signers = ", ".join(k[:16] or "<no keyid>" for k, _ in envelope.signatures)
    if not any(k in trusted for k, _ in envelope.signatures):
        return None, f"signed by key {signers}, which is not among the trusted keys"
    return None, "cryptography: the Ed25519 signature does not verify over the DSSE PAE with the trusted key"
