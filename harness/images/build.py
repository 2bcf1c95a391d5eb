"""Build, pull and re-lock role images with the machine's container engine.

Builds go through the engine's CLI (``docker build`` with BuildKit, or ``podman
build``) because build secrets — how a proxy CA reaches pip without landing in a
layer — are a CLI feature, not one of the Engine API. A build may swap the
base (``base_image``): the image then carries the substitution in its labels
(``io.infkit.base.substituted-for``) and runs record it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.contract.atomic import atomic_write_text
from harness.contract.result import utc_now
from harness.errors import CapabilityMissing, InfkitError, InvalidInput
from harness.images.engine import docker_engine_present
from harness.images.locks import REPO_ROOT, ImageLock
from harness.images.provenance import build_input_labels

DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELHOUSE_CONTEXT = "wheelhouse"  # the Dockerfile stage a --build-context of this name replaces
BUILD_TIMEOUT_S = 3600
SOURCE_URL = "https://github.com/infkit/infkit"


@dataclass(frozen=True)
class BuildConfig:
    role: str
    engine: str | None = None  # docker | podman; None: INFKIT_CONTAINER_ENGINE, else detected
    base_image: str | None = None  # swap the locked base (e.g. a locally imported Debian)
    ca_bundle: Path | None = None  # passed as build secret `cabundle`; None: the system bundle if present
    network_host: bool = True  # podman builds on these machines reach the mirrors only through the host network
    # "auto": where the Dockerfile takes a wheelhouse, the host's pip fills one (falling back to the
    # indexes, with a notice, when it cannot); "off": the indexes only; else a folder that must hold every wheel.
    wheelhouse: str = "auto"
    log_path: Path | None = None  # the engine's build output, streamed here as it comes

    def check(self) -> None:
        if self.wheelhouse not in ("auto", "off") and not Path(self.wheelhouse).is_dir():
            raise InvalidInput(f"--wheelhouse {self.wheelhouse!r} is neither auto, off nor a folder")


@dataclass(frozen=True)
class BuildOutcome:
    refs: tuple[str, ...]
    image_id: str
    base_image: str
    base_substituted_for: str | None
    seconds: float
    wheelhouse: Path | None = None  # the folder the build installed from, if any


def detect_engine(requested: str | None = None) -> str:
    engine = requested or os.environ.get("INFKIT_CONTAINER_ENGINE")
    if engine:
        if engine not in ("docker", "podman"):
            raise InvalidInput(f"unknown container engine {engine!r}", hint="docker or podman")
        if not shutil.which(engine):
            raise CapabilityMissing(f"{engine} is not installed")
        return engine
    if shutil.which("docker") and docker_engine_present():
        return "docker"
    if shutil.which("podman"):
        return "podman"
    raise CapabilityMissing("no container engine (docker with a running daemon, or podman)",
                            hint="see docs/images.md: podman works on machines without a Docker daemon")


def _run(argv: list[str], timeout_s: float, what: str) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise InfkitError(f"{what} took longer than {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise InfkitError(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def git_revision(root: Path = REPO_ROOT) -> str:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def image_id(engine: str, ref: str) -> str | None:
    proc = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        return None
    found = proc.stdout.strip()
    return found if found.startswith("sha256:") else f"sha256:{found}"


def build_argv(lock: ImageLock, cfg: BuildConfig, engine: str, base_id: str | None,
               wheelhouse: Path | None = None) -> list[str]:
    """The engine command line that builds ``lock``'s role (pure: tested without an engine)."""
    base = cfg.base_image or lock.base_image
    if cfg.base_image:
        base_name, base_digest, substituted = cfg.base_image, base_id or "", lock.base_image
    else:
        base_name, base_digest, substituted = lock.doc["base"]["name"], lock.doc["base"]["digest"], ""
    args = {
        "BASE_IMAGE": base, "BASE_NAME": base_name, "BASE_DIGEST": base_digest,
        "BASE_SUBSTITUTED_FOR": substituted, "SOURCE": SOURCE_URL,
        "REVISION": git_revision(), "CREATED": utc_now(),
    }
    argv = [engine, "build", "-f", str(lock.dockerfile), "-t", lock.local_ref, "-t", lock.tag_ref]
    if engine == "podman":
        # HEALTHCHECK survives only in the docker image format; local bases must not be pulled
        argv += ["--format", "docker", "--pull=never" if cfg.base_image else "--pull=missing"]
    if cfg.network_host:
        argv += ["--network=host"]
    ca = cfg.ca_bundle if cfg.ca_bundle is not None else (DEFAULT_CA_BUNDLE if DEFAULT_CA_BUNDLE.is_file() else None)
    if ca:
        argv += ["--secret", f"id=cabundle,src={ca}"]
    if wheelhouse:
        argv += ["--build-context", f"{WHEELHOUSE_CONTEXT}={wheelhouse}"]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    # The Dockerfile's LABELs carry the same values; labels given here are applied even when
    # every layer comes from the cache (podman does not re-run a cached LABEL for new ARG values).
    labels = {"org.opencontainers.image.revision": args["REVISION"],
              "org.opencontainers.image.created": args["CREATED"],
              "org.opencontainers.image.base.name": base_name, "org.opencontainers.image.base.digest": base_digest,
              "io.infkit.base.substituted-for": substituted, **build_input_labels(lock, args, wheelhouse)}
    for name, value in labels.items():
        argv += ["--label", f"{name}={value}"]
    return argv + [str(REPO_ROOT)]


def takes_wheelhouse(lock: ImageLock) -> bool:
    """Whether the role's Dockerfile declares the ``wheelhouse`` stage a build context replaces."""
    return re.search(rf"(?im)^FROM\s+scratch\s+AS\s+{WHEELHOUSE_CONTEXT}\s*$", lock.dockerfile.read_text()) is not None


def prepare_wheelhouse(lock: ImageLock, cfg: BuildConfig, progress: Callable[[str], None]) -> Path | None:
    """The folder to pass as the ``wheelhouse`` build context, or None to build from the indexes."""
    from harness.images.wheelhouse import default_dir, fill_wheelhouse

    if cfg.wheelhouse == "off" or not takes_wheelhouse(lock):
        return None
    explicit = cfg.wheelhouse != "auto"
    try:
        found = fill_wheelhouse(lock, Path(cfg.wheelhouse) if explicit else default_dir(lock.role))
    except InfkitError as exc:
        if explicit:
            raise
        progress(f"{lock.role}: no wheelhouse from the host's pip ({exc}); building from the indexes")
        return None
    progress(f"{lock.role}: wheelhouse {found.path} ({found.wheels} wheels, {found.total_bytes / 1e6:.0f} MB, "
             f"hashes match {lock.doc['dependency_lock']['path']})")
    return found.path


def build_image(lock: ImageLock, cfg: BuildConfig, progress: Callable[[str], None] = print) -> BuildOutcome:
    cfg.check()
    if lock.base_placeholder and not cfg.base_image:
        raise CapabilityMissing(
            f"images/{lock.role}.lock.json has a placeholder base digest for {lock.doc['base']['name']}",
            hint=f"resolve it with `make lock-base ROLE={lock.role}` where the registry is reachable",
        )
    engine = detect_engine(cfg.engine)
    base_id = image_id(engine, cfg.base_image) if cfg.base_image else None
    if cfg.base_image and base_id is None:
        raise InvalidInput(f"base image {cfg.base_image} is not in the {engine} image store")
    t0 = time.monotonic()
    wheelhouse = prepare_wheelhouse(lock, cfg, progress)
    argv = build_argv(lock, cfg, engine, base_id, wheelhouse)
    code, tail = _stream(argv, dict(os.environ, DOCKER_BUILDKIT="1"), cfg.log_path, BUILD_TIMEOUT_S)
    if code != 0:
        where = f" (full log: {cfg.log_path})" if cfg.log_path else ""
        raise InfkitError(f"building {lock.role} with {engine} failed (exit {code}){where}:\n{tail}")
    built = image_id(engine, lock.local_ref)
    if built is None:
        raise InfkitError(f"{engine} reported success but {lock.local_ref} is not in the image store")
    return BuildOutcome((lock.local_ref, lock.tag_ref), built, cfg.base_image or lock.base_image,
                        lock.base_image if cfg.base_image else None, time.monotonic() - t0, wheelhouse)


def pin_dockerfile_base(dockerfile: Path, name: str, digest: str) -> None:
    """Rewrite the Dockerfile's ``BASE_IMAGE``/``BASE_DIGEST`` defaults to ``name@digest``."""
    text = dockerfile.read_text()
    new = re.sub(r"(?m)^ARG BASE_IMAGE=.*$", f"ARG BASE_IMAGE={name}@{digest}", text)
    new = re.sub(r"(?m)^ARG BASE_DIGEST=.*$", f"ARG BASE_DIGEST={digest}", new)
    if new == text and f"{name}@{digest}" not in text:
        raise InvalidInput(f"{dockerfile} has no `ARG BASE_IMAGE=` line to rewrite")
    atomic_write_text(dockerfile, new)


def _stream(argv: list[str], env: dict[str, str], log_path: Path | None, timeout_s: float) -> tuple[int, str]:
    """Run a build, appending its output to ``log_path`` line by line; (exit code, last 15 lines)."""
    import threading

    tail: list[str] = []
    with open(log_path or os.devnull, "a", encoding="utf-8") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        timer = threading.Timer(timeout_s, proc.kill)  # a silent, hung build is stopped too
        timer.start()
        try:
            for line in proc.stdout or ():
                log.write(line)
                log.flush()
                tail = (tail + [line.rstrip()])[-15:]
            code = proc.wait()
        finally:
            timer.cancel()
    if code < 0 and time.monotonic() - started >= timeout_s:
        raise InfkitError(f"the build took longer than {timeout_s:.0f} s")
    return code, "\n".join(tail)
