"""A role's wheelhouse: the wheels its dependency lock names, fetched by the host's pip.

Some wheels reach a build only through the host: ``torch==2.13.0+cpu`` comes from
PyTorch's CPU index, which a machine may reach only through its own pip setup
(``find-links``, a local index). ``fill_wheelhouse`` runs the host's ``pip download``
for the image's Python and platform with ``--require-hashes``, so every file is
checked against ``requirements/<role>.lock``, and then re-checks the folder: each
locked distribution must be present with its locked sha256. The build receives
the folder as the named build context ``wheelhouse`` and installs from it alone
(``--no-index``); without one, the same Dockerfile installs from the indexes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.contract.paths import cache_root
from harness.errors import InfkitError, InvalidInput
from harness.ids import sha256_file
from harness.images import deplock
from harness.images.locks import REPO_ROOT, ImageLock

PIP_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    wheels: int
    total_bytes: int
    seconds: float


def default_dir(role: str) -> Path:
    """``$INFKIT_CACHE/wheelhouse/<role>``: outside the repository and the build context, shared by checkouts."""
    return cache_root() / "wheelhouse" / role


def download_argv(lock_file: Path, dest: Path, target: deplock.LockTarget) -> list[str]:
    """``pip download`` of exactly the locked files for the image's interpreter (pure: tested without pip)."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
            "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest), "-r", str(lock_file),
            "--python-version", target.python_version, "--implementation", "cp"]
    for tag in deplock.manylinux_tags(target.glibc, target.arch):
        argv += ["--platform", tag]
    for url in target.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in target.find_links:
        argv += ["--find-links", link]
    return argv


def missing_wheels(lock_file: Path, folder: Path) -> list[str]:
    """``name==version`` of every locked distribution with no file of the locked sha256 in ``folder``."""
    present = {sha256_file(p).removeprefix("sha256:") for p in folder.glob("*.whl")}
    return [f"{d.name}=={d.version}" for d in deplock.parse_lock(lock_file.read_text()) if d.sha256 not in present]


def fetch_locked(lock_file: Path, dest: Path, target: deplock.LockTarget, log_path: Path | None = None) -> Wheelhouse:
    """Download every wheel ``lock_file`` names, for ``target``, into ``dest``; verify each against the lock."""
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not missing_wheels(lock_file, dest):  # every locked file already there, hash for hash
        return _summary(dest, t0)
    try:
        proc = subprocess.run(download_argv(lock_file, dest, target), capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise InfkitError(f"pip download of {lock_file.name} took longer than {PIP_TIMEOUT_S} s") from exc
    if log_path:
        log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")] or proc.stderr.splitlines()[
            -3:
        ]
        raise InfkitError(
            f"the host's pip could not fetch every wheel of {lock_file.name}: {' '.join(errors[-2:])}",
            hint="give pip the index that has them (e.g. --extra-index-url https://download.pytorch.org/whl/cpu), "
            "or build without a wheelhouse",
        )
    missing = missing_wheels(lock_file, dest)
    if missing:
        raise InvalidInput(
            f"{dest} lacks {len(missing)} wheel(s) of {lock_file.name} with the locked hash: {', '.join(missing[:5])}"
        )
    return _summary(dest, t0)


def _summary(dest: Path, t0: float) -> Wheelhouse:
    wheels = list(dest.glob("*.whl"))
    return Wheelhouse(dest, len(wheels), sum(p.stat().st_size for p in wheels), time.monotonic() - t0)


def lock_target(lock_file: Path, extra_index_urls: tuple[str, ...] = ()) -> deplock.LockTarget:
    """The interpreter and glibc a lock was resolved for, from its header (``render_lock``'s second line)."""
    m = re.search(r"^# Target: CPython (\S+), glibc (\S+) (\S+);", lock_file.read_text(), re.M)
    if not m:
        raise InvalidInput(f"{lock_file} has no `# Target: CPython X, glibc Y ARCH;` header line")
    return deplock.LockTarget(
        python_version=m.group(1), glibc=m.group(2), arch=m.group(3), extra_index_urls=extra_index_urls
    )


def fill_wheelhouse(
    lock: ImageLock, dest: Path | None = None, *, extra_index_urls: tuple[str, ...] = (), log_path: Path | None = None
) -> Wheelhouse:
    """Download the role's locked wheels with the host's pip into ``dest`` and verify them against the lock."""
    lock_file = REPO_ROOT / lock.doc["dependency_lock"]["path"]
    return fetch_locked(
        lock_file, Path(dest) if dest else default_dir(lock.role), lock_target(lock_file, extra_index_urls), log_path
    )
