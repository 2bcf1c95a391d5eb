"""Output paths, checked before any work starts.

A command that will write a file or a run directory calls ``check_output_file`` or
``check_output_dir`` first, so a path it can never write is a one-line error before a
run, not an ``OSError`` after it. Nothing is created by the check: writability is
probed with a temporary file in the nearest existing folder, removed at once (the
only test that holds for root and for read-only file systems alike).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from harness.errors import InvalidInput

DEFAULT_NAME_MAX_BYTES = 255
DEFAULT_PATH_MAX_BYTES = 4096


def _limit(name: str, default: int) -> int:
    try:
        return os.pathconf("/", name)
    except (OSError, ValueError):
        return default


def _stat(path: Path, flag: str) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # reported by the ancestor walk: a file stands where a folder must be
    except OSError as exc:
        raise InvalidInput(f"{flag} {path}: {exc.strerror or exc}") from None


def _existing_ancestor(path: Path, flag: str) -> tuple[Path, os.stat_result]:
    probe = path
    while True:
        info = _stat(probe, flag)
        if info is not None:
            return probe, info
        if probe.parent == probe:
            raise InvalidInput(f"{flag} {path}: no existing folder above it")
        probe = probe.parent


def _check_name(path: Path, flag: str) -> None:
    text = os.fsencode(path)  # the bytes the kernel sees (surrogate escapes included)
    if b"\x00" in text:
        raise InvalidInput(f"{flag}: a path cannot contain a NUL byte")
    path_max = _limit("PC_PATH_MAX", DEFAULT_PATH_MAX_BYTES)
    if len(os.fsencode(path.absolute())) >= path_max:
        raise InvalidInput(f"{flag}: a path of {len(text)} bytes is longer than the limit of {path_max}")
    name_max = _limit("PC_NAME_MAX", DEFAULT_NAME_MAX_BYTES)
    for part in text.split(b"/"):
        if len(part) > name_max:
            shown = part[:24].decode("utf-8", "replace")
            raise InvalidInput(f"{flag}: the path component {shown}... is {len(part)} bytes, longer than the "
                               f"file system's limit of {name_max}")


def _check_creatable(folder_wanted: Path, flag: str, shown: Path) -> None:
    """The nearest existing folder at or above ``folder_wanted`` is a folder and accepts new files."""
    folder, info = _existing_ancestor(folder_wanted, flag)
    if not stat.S_ISDIR(info.st_mode) and not (stat.S_ISLNK(info.st_mode) and folder.is_dir()):
        raise InvalidInput(f"{flag} {shown}: {folder} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".infkit-probe-", dir=folder)
    except OSError as exc:
        raise InvalidInput(f"{flag} {shown}: cannot create files in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)


def _path(path: str | os.PathLike, flag: str) -> Path:
    if not os.fspath(path):
        raise InvalidInput(f"{flag}: an empty path")
    p = Path(path)
    _check_name(p, flag)
    return p


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` can be written as a file (replacing a regular file there); else a one-line InvalidInput."""
    p = _path(path, flag)
    info = _stat(p, flag)
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            info = os.stat(p) if p.exists() else info
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInput(f"{flag} {p}: is a directory; give a file name")
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
            raise InvalidInput(f"{flag} {p}: exists and is not a regular file")
    _check_creatable(p.absolute().parent, flag, p)
    return p


def check_output_dir(path: str | os.PathLike, flag: str) -> Path:
    """``path`` is, or can be created as, a folder that accepts new files; else a one-line InvalidInput."""
    p = _path(path, flag)
    info = _stat(p, flag)
    if info is not None and not p.is_dir():
        raise InvalidInput(f"{flag} {p}: exists and is not a directory")
    _check_creatable(p.absolute(), flag, p)
    return p


def cache_root() -> Path:
    """``$INFKIT_CACHE``, else ``~/.cache/infkit``: outside the repository, shared by checkouts."""
    env = os.environ.get("INFKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "infkit"
