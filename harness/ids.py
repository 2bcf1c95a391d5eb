"""Identifiers: run ids and content hashes."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import secrets
from pathlib import Path

from harness.contract.jsonio import dumps_bytes


def new_run_id() -> str:
    """A sortable, collision-resistant run id: 20261130T080312Z-3f9a1c."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj: object, what: str = "a canonical document") -> bytes:
    """The one canonical JSON form hashed into ids: sorted keys, no spaces, UTF-8.

    A value JSON cannot hold (NaN, infinity, a lone surrogate) is an ``InvalidInput`` naming
    its JSON pointer, never a bare ``ValueError``/``UnicodeEncodeError``.
    """
    return dumps_bytes(obj, what, sort_keys=True, separators=(",", ":"))


def sha256_canonical(obj: object) -> str:
    """sha256 of ``canonical_json(obj)``: the id of a config or spec dict."""
    return sha256_bytes(canonical_json(obj))


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            h.update(chunk)
    return "sha256:" + h.hexdigest()
