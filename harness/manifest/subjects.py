"""Subjects: the files of a run, named relative to a root, each with its sha256.

Names are POSIX paths relative to the root. A name that is absolute, has a
``..`` or empty component, or resolves (through a symlink) outside the root is
refused before anything is opened, so a hostile manifest cannot make ``audit``
read outside the root.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InvalidInput

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Subject:
    name: str
    sha256: str  # hex, as in-toto writes it

    def to_dict(self) -> dict:
        return {"name": self.name, "digest": {"sha256": self.sha256}}


def unsafe_name_reason(name: object) -> str | None:
    """Why ``name`` cannot be a subject path (None when it is a plain relative path)."""
    if not isinstance(name, str) or not name:
        return "is not a non-empty string"
    if "\x00" in name or "\\" in name:
        return "contains a NUL or backslash"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "is an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "escapes the root through '..'"
    if any(p in ("", ".") for p in parts):
        return "is not a normalised relative path"
    return None


def is_within(path: str, root_real: str) -> bool:
    return path == root_real or path.startswith(root_real.rstrip(os.sep) + os.sep)


def resolve_inside(root_real: str, name: str) -> tuple[str | None, str | None]:
    """(real path, None) for a safe name, or (None, reason). Reads no file content."""
    reason = unsafe_name_reason(name)
    if reason:
        return None, reason
    real = os.path.realpath(os.path.join(root_real, name))
    if not is_within(real, root_real):
        return None, "resolves through a symlink to a path outside the root"
    return real, None


def hash_file(path: str, keep_bytes: int = 0) -> tuple[str, bytes | None]:
    """(sha256 hex, the content when it is at most ``keep_bytes`` long, else None)."""
    h = hashlib.sha256()
    kept: list[bytes] | None = [] if keep_bytes else None
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
            if kept is not None:
                if size > keep_bytes:
                    kept = None
                else:
                    kept.append(chunk)
    return h.hexdigest(), (b"".join(kept) if kept is not None else None)


def iter_files(directory: str, root_real: str) -> Iterator[str]:
    """Real paths of regular files under ``directory`` (symlinked files included when they stay
    inside the root; symlinked directories are not followed)."""
    for current, _dirs, files in os.walk(directory, followlinks=False):
        for fname in files:
            path = os.path.join(current, fname)
            real = os.path.realpath(path)
            if is_within(real, root_real) and os.path.isfile(real):
                yield path


def relative_name(path: str | Path, root_real: str) -> str:
    return Path(os.path.relpath(path, root_real)).as_posix()


def run_dir_name(run_dir: str | Path, root: str | Path) -> tuple[str, str]:
    """(real root, run dir relative to it); the run dir must be a directory under the root."""
    root_real = os.path.realpath(root)
    run_real = os.path.realpath(run_dir)
    if not os.path.isdir(run_real):
        raise InvalidInput(f"run directory {run_dir}: not a directory")
    if not is_within(run_real, root_real) or run_real == root_real:
        raise InvalidInput(
            f"run directory {run_dir} is not inside the root {root_real}",
            hint="subjects are named relative to the root; pass --root DIR that contains the run",
        )
    return root_real, relative_name(run_real, root_real)


def collect_subjects(run_dir: str | Path, root_real: str, exclude: frozenset[str] = frozenset()) -> list[Subject]:
    """Every regular file under ``run_dir`` (sorted by name), hashed. A symlink that points
    outside the root is an error: the manifest would vouch for a file it cannot name."""
    subjects = []
    for current, dirs, files in os.walk(run_dir, followlinks=False):
        for entry in [*dirs, *files]:
            path = os.path.join(current, entry)
            if os.path.islink(path) and not is_within(os.path.realpath(path), root_real):
                raise InvalidInput(
                    f"{path} is a symlink to {os.path.realpath(path)}, outside the root {root_real}",
                    hint="copy the file into the run directory or remove the link before signing",
                )
        for fname in files:
            path = os.path.join(current, fname)
            name = relative_name(os.path.abspath(path), root_real)
            if name in exclude or not os.path.isfile(path):
                continue
            subjects.append(Subject(name, hash_file(path)[0]))
    return sorted(subjects, key=lambda s: s.name)
