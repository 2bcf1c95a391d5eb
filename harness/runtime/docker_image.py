"""Which image a container runs, and what the run records about it.

Resolution order: an explicit reference (``INFKIT_IMAGE``), else the role's local build
(``localhost/infkit/<role>:<tag>``), else the lock's ``registry_ref@digest`` (pulled when
missing). A role with neither a local build nor a pushed digest is built on first use —
one notice line, the engine's build log in the run directory — so one command works on a
fresh GPU machine; ``pull_only`` (``PULL_ONLY=1``) keeps the strict behaviour and stops
with the command that builds it instead, and where the lock has a pushed digest it runs that
image (pulled by digest when missing) even if a local build exists.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing
from harness.images.driver import DriverCheck, check_driver
from harness.images.locks import ImageLock

Notify = Callable[[str], None]


def notify_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def client():
    """A Docker-API client that answered a ping; ``CapabilityMissing`` when none is reachable."""
    try:
        import docker
    except ImportError as exc:
        raise CapabilityMissing("the docker SDK is not installed", hint="pip install 'infkit[docker]'") from exc
    try:
        c = docker.from_env(timeout=120)
        c.ping()
    except docker.errors.DockerException as exc:
        raise CapabilityMissing(
            f"no Docker-API engine reachable ({exc})",
            hint="start Docker, or `podman system service` and set DOCKER_HOST (docs/images.md)",
        ) from exc
    return c


def build_log_name(role: str) -> str:
    return f"image-build-{role}.log"


def resolve_image(
    api,
    lock: ImageLock,
    override: str | None = None,
    *,
    pull_only: bool = True,
    log_dir: Path | None = None,
    base_image: str | None = None,
    notify: Notify = notify_stderr,
):
    """The SDK image to run (see the module docstring for the order)."""
    import docker

    if override:
        try:
            return api.images.get(override)
        except docker.errors.ImageNotFound:
            raise CapabilityMissing(f"image {override} is not present on the engine") from None
    if not (pull_only and lock.digest):  # PULL_ONLY with a pushed digest: the registry's image, never a local build
        try:
            return api.images.get(lock.local_ref)
        except docker.errors.ImageNotFound:
            pass
    if lock.digest or pull_only:
        ref = lock.pull_ref()  # CapabilityMissing naming `make images ROLE=…` while there is no digest
        try:
            return api.images.get(ref)
        except docker.errors.ImageNotFound:
            return api.images.pull(ref)
    return build_on_first_use(api, lock, log_dir, base_image, notify)


def build_on_first_use(api, lock: ImageLock, log_dir: Path | None, base_image: str | None, notify: Notify):
    """Build the role's image with the machine's engine, as `make images ROLE=…` would, and return it."""
    from harness.images.build import BuildConfig, build_image

    log_path = (log_dir / build_log_name(lock.role)) if log_dir else None
    where = f"; log: {log_path}" if log_path else ""
    notify(
        f"{lock.role}: no local build and no pushed digest, building it now (first use, several minutes; "
        f"PULL_ONLY=1 refuses instead){where}"
    )

    def to_log(line: str) -> None:  # the wheelhouse line belongs with the build, not on the terminal
        if log_path:
            with log_path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    outcome = build_image(lock, BuildConfig(role=lock.role, base_image=base_image, log_path=log_path), progress=to_log)
    return api.images.get(outcome.image_id)


def image_record(lock: ImageLock, image) -> dict[str, Any]:
    """The run.json ``images`` entry: the digest this run actually used and any base substitution."""
    # A registry digest only when it is the locked one; a local build is named by its tag and image id.
    repo_digests = {d.partition("@")[2] for d in image.attrs.get("RepoDigests") or []}
    if lock.digest and lock.digest in repo_digests:
        ref, digest, source = lock.registry_ref, lock.digest, "registry"
    else:
        ref, digest, source = (image.tags or [lock.local_ref])[0], image.id, "local build"
    labels = image.labels or {}
    return {
        "role": lock.role,
        "ref": ref,
        "digest": digest,
        "base_substituted": labels.get("io.infkit.base.substituted-for") or None,
        "source": source,
    }


def check_gpu_request(
    lock: ImageLock, gpus: tuple[int, ...], forward_compat: bool, notify: Notify = notify_stderr
) -> DriverCheck | None:
    """A CUDA role needs a GPU and a driver that runs its CUDA release; warns when features are lost."""
    if lock.cuda is None:
        return None
    if not gpus:
        raise CapabilityMissing(f"role {lock.role} runs on CUDA {lock.cuda.version} and needs a GPU", hint="pass GPU=N")
    found = check_driver(lock.cuda.version, lock.cuda.min_driver, allow_forward_compat=forward_compat)
    if found.warning:
        notify(f"{lock.role}: {found.warning}")
    return found
