"""Subjects: the files of a run, named relative to a root, each with its sha256.

Names are POSIX paths relative to the root. A name that is absolute, has a
``..`` or empty component, or resolves (through a symlink) outside the root is
refused before anything is opened, so a hostile manifest cannot make ``audit``
read outside the root.
"""

from __future__ import annotations

import hashlib
import os
import stat
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


class RootResolver:
    """Maps subject names to real paths under one root, refusing unsafe ones unread.

    Real paths of parent directories are cached, so resolving 10,000 names costs
    about one ``lstat`` each rather than one per path component.
    """

    def __init__(self, root_real: str):
        self.root_real = root_real
        self._dirs: dict[str, str] = {"": root_real}

    def resolve(self, name: object) -> tuple[str | None, str | None]:
        """(real path, None) for a safe name, or (None, reason)."""
        reason = unsafe_name_reason(name)
        if reason:
            return None, reason
        parent, _, leaf = str(name).rpartition("/")
        real_parent = self._dirs.get(parent)
        if real_parent is None:
            real_parent = self._dirs[parent] = os.path.realpath(os.path.join(self.root_real, parent))
        path = os.path.join(real_parent, leaf)
        if os.path.islink(path):
            path = os.path.realpath(path)
        if not is_within(real_parent, self.root_real) or not is_within(path, self.root_real):
            return None, "resolves through a symlink to a path outside the root"
        return path, None


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


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _link_problem(path: str, root_real: str) -> str | None:
    real = os.path.realpath(path)
    if not is_within(real, root_real):
        return f"is a symlink to {real}, outside the root"
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return "is a dangling symlink"
    if stat.S_ISDIR(mode):
        return "is a symlink to a directory"
    if not stat.S_ISREG(mode):
        return f"is a symlink to {_special_kind(mode)}"
    return None


def run_files(directory: str, root_real: str, *, recursive: bool = True) -> Iterator[tuple[str, str | None]]:
    """Every non-directory entry under ``directory`` (a real path): ``(path, None)`` for what a manifest
    can list — a regular file, or a symlink to one inside the root — and ``(path, why not)`` for the rest
    (a symlink out of the root, to a directory or dangling; a pipe, socket or device). Symlinked
    directories are never followed."""
    stack = [directory]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    yield entry.path, _link_problem(entry.path, root_real)
                elif entry.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path, None
                else:
                    yield entry.path, f"is {_special_kind(entry.stat(follow_symlinks=False).st_mode)}"


def relative_name(path: str | Path, root_real: str) -> str:
    path = str(path)
    prefix = root_real.rstrip(os.sep) + os.sep
    if os.sep == "/" and path.startswith(prefix):
        return path[len(prefix):]
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


def check_run_files(run_dir: str | Path, root_real: str, *, links: bool = True) -> None:
    """Refuse a run directory holding anything a manifest cannot name: the manifest would vouch for a
    file it cannot list (a link out of the root), or skip one that ``audit`` then reports. Without
    ``links`` every symlink is refused (a run a container wrote cannot point the host key elsewhere)."""
    for path, problem in run_files(str(run_dir), root_real):
        if problem is None and not links and os.path.islink(path):
            problem = "is a symlink, and a run written in a container may hold none"
        if problem is not None:
            raise InvalidInput(f"cannot sign: {path} {problem}",
                               hint="a run directory holds regular files; copy the file in or remove the entry")


def collect_subjects(run_dir: str | Path, root_real: str, exclude: frozenset[str] = frozenset(), *,
                     links: bool = True) -> list[Subject]:
    """Every file under ``run_dir`` (a real path; sorted by name), hashed; see ``check_run_files``."""
    check_run_files(run_dir, root_real, links=links)
    subjects = []
    for path, _ in run_files(str(run_dir), root_real):
        name = relative_name(path, root_real)
        if name not in exclude:
            subjects.append(Subject(name, hash_file(path)[0]))
    return sorted(subjects, key=lambda s: s.name)
