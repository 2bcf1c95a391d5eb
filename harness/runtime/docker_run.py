"""Run one harness command inside a role image and wait for it.

This is how ``--runtime docker`` works for commands that are not servers
(``infkit mech …``, ``infkit cuda …``): the same argv, executed by the image's
entry point (``python3 -m harness`` from the read-only mount) with the run
directory — the container's own folder — as its only read-write mount, at its host
path, under the confinement of ``harness.runtime.docker_confine``. The container has
no network unless asked. Its log is created by the host before the start
(``HostLog``) and written through that descriptor only. The image actually used (digest, base substitution) is passed in
``INFKIT_CONTAINER_IMAGE``, so the run records it in its own ``run.json``
(``harness.rundir.record.native_image``), and so do its manifest and audit.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InfkitError
from harness.images.locks import load_lock
from harness.rundir.directory import SIGN_QUEUE_ENV
from harness.rundir.record import CONTAINER_IMAGE_ENV
from harness.runtime.docker import (
    DEFAULT_SHM_BYTES,
    DockerSettings,
    container_options,
    device_requests,
    refuse_podman_gpus,
)
from harness.runtime.docker_confine import Confinement, HostLog
from harness.runtime.docker_image import (
    check_gpu_request,
    client,
    image_record,
    notify_stderr,
    resolve_image,
)
from harness.runtime.gpus import Device

ENTRYPOINT = "/opt/infkit-image/infkit-entrypoint.sh"


@dataclass(frozen=True)
class HarnessRun:
    exit_code: int
    log_path: Path
    image: dict[str, Any]
    seconds: float
    output: str = ""  # the container's output as the engine gave it (the log file lies in its folder)


def harness_git_env(harness_root: Path) -> dict[str, str]:
    """The mounted harness's git revision, read on the host (images carry no git)."""
    from harness.rundir.fingerprint import git_state

    commit, dirty = git_state(Path(harness_root))
    if commit is None:
        return {}
    return {"INFKIT_HARNESS_GIT_COMMIT": commit, "INFKIT_HARNESS_GIT_DIRTY": "1" if dirty else "0"}


def run_harness(role: str, args: list[str], run_dir: Path, *, gpus: tuple[Device, ...] = (), network: bool = False,
                timeout_s: float = 3600.0, log_name: str = "container.log",
                settings: DockerSettings | None = None, api=None, sign_queue: Path | None = None) -> HarnessRun:
    """Run ``infkit <args>`` in ``role``'s image; the log lands in ``run_dir/log_name``.

    The image has no signing key: with ``sign_queue`` (a file under ``run_dir``) the runs the
    command finishes are listed there for the host to sign (``harness.rundir.directory.sign_queued``).
    """
    settings = settings or DockerSettings.from_env()
    lock = load_lock(role)
    check_gpu_request(lock, gpus, settings.forward_compat)
    api = api or client()
    if gpus:
        refuse_podman_gpus(api)
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    image = resolve_image(api, lock, settings.image, pull_only=settings.pull_only, log_dir=run_dir,
                          base_image=settings.base_image, notify=notify_stderr)
    record = image_record(lock, image)
    opts = container_options(tuple(args), Confinement.for_container(run_dir, network=network), settings)
    opts["environment"] |= {CONTAINER_IMAGE_ENV: json.dumps(record), **harness_git_env(settings.harness_root),
                            **({SIGN_QUEUE_ENV: str(sign_queue)} if sign_queue else {})}
    log = HostLog(run_dir, log_name)  # before the container exists: it cannot plant a link in its place
    t0 = time.monotonic()
    container = api.containers.run(
        image.id, entrypoint=[ENTRYPOINT], command=list(args), detach=True, device_requests=device_requests(gpus),
        shm_size=DEFAULT_SHM_BYTES, **opts,
    )
    try:
        try:
            code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
        except Exception as exc:
            container.kill()
            raise InfkitError(f"{role} container did not finish within {timeout_s:.0f} s") from exc
        output = container.logs(stdout=True, stderr=True)
        log.write(output)
    finally:
        log.close()
        try:
            container.remove(force=True)
        except Exception:
            pass
    return HarnessRun(code, log.path, record, time.monotonic() - t0, output.decode(errors="replace"))


