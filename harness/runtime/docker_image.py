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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing
from harness.images.driver import DriverCheck, check_driver
from harness.images.locks import ImageLock
from harness.runtime.gpus import Device

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


def holds_image(api, ref: str) -> bool:
    import docker

    try:
        api.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


@dataclass(frozen=True)
class ImageSource:
    """Where a role's image comes from, decided before any start: ``source`` is ``override`` (INFKIT_IMAGE),
    ``local build``, ``registry`` (pulled by digest when missing) or ``build`` (on first use); ``missing`` is why
    it cannot be had here (a run records the servers that need it as ``capability_missing`` with that reason)."""

    role: str
    source: str
    ref: str
    missing: str | None = None
    hint: str | None = None
    needs: tuple[str, ...] = ()  # what getting it reaches beyond this host: "registry", "PyPI"
    base: str | None = None  # a build's base image

    def record(self) -> dict[str, Any]:
        return {"role": self.role, "source": self.source, "ref": self.ref, "base": self.base,
                "missing": self.missing, "hint": self.hint, "needs": list(self.needs)}


def image_source(lock: ImageLock, override: str | None = None, *, pull_only: bool = True,
                 base_image: str | None = None, present: Callable[[str], bool] | None = None) -> ImageSource:
    """The module docstring's order, without an engine call: ``present(ref)`` says whether the engine holds an
    image (None: unknown, as on a fresh host — a dry run plans that case)."""
    held = present or (lambda ref: False)
    if override:
        if present is not None and not present(override):
            return ImageSource(lock.role, "override", override, f"image {override} is not present on the engine")
        return ImageSource(lock.role, "override", override)
    if not (pull_only and lock.digest) and held(lock.local_ref):  # PULL_ONLY + digest: never a local build
        return ImageSource(lock.role, "local build", lock.local_ref)
    if lock.digest:
        return ImageSource(lock.role, "registry", f"{lock.registry_ref}@{lock.digest}", needs=("registry",))
    hint = f"build it with `make images ROLE={lock.role}`, or push it and run `make lock ROLE={lock.role}`"
    if pull_only:
        return ImageSource(lock.role, "registry", lock.tag_ref, f"images/{lock.role}.lock.json has no image digest "
                           "yet (not built and pushed) and PULL_ONLY=1 refuses to build it", hint)
    if lock.base_placeholder and not base_image:
        return ImageSource(lock.role, "build", lock.local_ref, f"images/{lock.role}.lock.json has no image digest "
                           f"and a placeholder base digest for {lock.doc['base']['name']}, so it cannot be built",
                           f"resolve it with `make lock-base ROLE={lock.role}` where the registry is reachable, or "
                           "build on a local base (INFKIT_LOCAL_BASE_IMAGE)")
    needs = ("PyPI",) + (() if base_image else ("registry",))
    return ImageSource(lock.role, "build", lock.local_ref, needs=needs, base=base_image or lock.base_image)


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
    """The SDK image to run (``image_source`` decides which; this gets it)."""
    import docker

    found = image_source(lock, override, pull_only=pull_only, base_image=base_image,
                         present=lambda ref: holds_image(api, ref))
    if found.missing:
        raise CapabilityMissing(found.missing, hint=found.hint)
    if found.source == "registry":
        try:
            return api.images.get(found.ref)
        except docker.errors.ImageNotFound:
            return api.images.pull(found.ref)
    if found.source == "build":
        return build_on_first_use(api, lock, log_dir, base_image, notify)
    return api.images.get(found.ref)


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
    lock: ImageLock, gpus: tuple[Device, ...], forward_compat: bool, notify: Notify = notify_stderr
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
