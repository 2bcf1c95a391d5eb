"""Atomic writes: a temp file in the target's folder, fsync, then rename.

A reader never sees a half-written file, and a crash leaves either the old
file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from harness.contract.jsonio import dumps_bytes


def atomic_write_bytes(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def atomic_write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


def dumps_json(doc: Any, what: str = "a document") -> str:
    """The project's one JSON layout for documents people also read (strict: see ``jsonio.dumps_bytes``)."""
    return dumps_bytes(doc, what, indent=2).decode("utf-8") + "\n"


def atomic_write_json(path: str | os.PathLike, doc: Any, mode: int = 0o644) -> Path:
    """Write ``doc`` atomically; a value JSON cannot hold is an error before anything is written."""
    return atomic_write_bytes(path, dumps_bytes(doc, str(path), indent=2) + b"\n", mode)
