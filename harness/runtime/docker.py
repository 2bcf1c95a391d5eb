"""The ``docker`` runtime: a role's pinned image through the Docker Engine API.

Works against any engine that speaks that API (Docker, or podman's
``podman system service`` through ``DOCKER_HOST``). A container always has:

- the harness mounted read-only at ``/opt/infkit`` (never baked into the image);
- the run directory mounted read-write at the same path as on the host, and any
  other existing absolute path named on the command line (a model directory)
  mounted read-only at its own path, so a spec's argv means the same inside;
- its server port published on 127.0.0.1 only (the server listens on 0.0.0.0
  inside the container's own network namespace);
- ``GPU=N`` as a device request, shared memory sized from the spec or the lock;
- its logs copied line by line into the run directory as they arrive.

Before a CUDA role starts, the host driver is checked against the lock's floor.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing, InfkitError
from harness.images.driver import check_driver
from harness.images.locks import REPO_ROOT, ImageLock, load_lock
from harness.runtime.base import (
    Runtime,
    ServerHandle,
    ServerSpec,
    ServerStartError,
    register_runtime,
)

HARNESS_MOUNT = "/opt/infkit"
DEFAULT_SHM_BYTES = 1 << 30


@dataclass(frozen=True)
class DockerSettings:
    """Runtime switches, read once from the environment (documented in docs/images.md)."""

    image: str | None = None  # INFKIT_IMAGE: run this reference instead of the role's lock
    forward_compat: bool = False  # INFKIT_CUDA_FORWARD_COMPAT=1: accept an older driver (data-centre GPUs)
    harness_root: Path = REPO_ROOT

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> DockerSettings:
        env = os.environ if environ is None else environ
        return cls(image=env.get("INFKIT_IMAGE") or None, forward_compat=env.get("INFKIT_CUDA_FORWARD_COMPAT") == "1")


def client():
    try:
        import docker
    except ImportError as exc:
        raise CapabilityMissing("the docker SDK is not installed", hint="pip install 'infkit[docker]'") from exc
    try:
        c = docker.from_env(timeout=120)
        c.ping()
    except docker.errors.DockerException as exc:
        raise CapabilityMissing(f"no Docker-API engine reachable ({exc})",
                                hint="start Docker, or `podman system service` and set DOCKER_HOST (docs/images.md)") from exc
    return c


def resolve_image(api, lock: ImageLock, override: str | None = None):
    """The image to run: an explicit reference, else a local build of the role, else the locked digest (pulled)."""
    import docker

    for ref in ([override] if override else [lock.local_ref]):
        try:
            return api.images.get(ref)
        except docker.errors.ImageNotFound:
            if override:
                raise CapabilityMissing(f"image {override} is not present on the engine") from None
    ref = lock.pull_ref()
    try:
        return api.images.get(ref)
    except docker.errors.ImageNotFound:
        return api.images.pull(ref)


def image_record(lock: ImageLock, image) -> dict[str, Any]:
    """The run.json ``images`` entry: the digest this run actually used and any base substitution."""
    # A registry digest only when it is the locked one; a local build is named by its tag and image id.
    repo_digests = {d.partition("@")[2] for d in image.attrs.get("RepoDigests") or []}
    if lock.digest and lock.digest in repo_digests:
        ref, digest = lock.registry_ref, lock.digest
    else:
        ref, digest = (image.tags or [lock.local_ref])[0], image.id
    labels = image.labels or {}
    return {
        "role": lock.role,
        "ref": ref,
        "digest": digest,
        "base_substituted": labels.get("io.infkit.base.substituted-for") or None,
    }


def check_gpu_request(lock: ImageLock, gpus: tuple[int, ...], settings: DockerSettings) -> None:
    if lock.cuda is None:
        return
    if not gpus:
        raise CapabilityMissing(f"role {lock.role} runs on CUDA {lock.cuda.version} and needs a GPU", hint="pass GPU=N")
    check_driver(lock.cuda.version, lock.cuda.min_driver, allow_forward_compat=settings.forward_compat)


def _path_values(arg: str) -> list[str]:
    """An argument's candidate paths: its value, or the string values of a JSON object argument
    (``--speculative-config '{"model": "/draft", ...}'`` names a draft model directory)."""
    value = arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg
    if value.startswith("{"):
        try:
            obj = json.loads(value)
        except ValueError:
            return [value]
        return [v for v in obj.values() if isinstance(v, str)] if isinstance(obj, dict) else []
    return [value]


def mounts_for(argv: tuple[str, ...], run_dir: Path, harness_root: Path) -> dict[str, dict[str, str]]:
    volumes = {str(harness_root): {"bind": HARNESS_MOUNT, "mode": "ro"}, str(run_dir): {"bind": str(run_dir), "mode": "rw"}}
    for value in (v for arg in argv for v in _path_values(arg)):
        path = Path(value)
        if not path.is_absolute() or not path.exists() or path.resolve() == Path("/"):
            continue
        if path.resolve().is_relative_to(run_dir.resolve()) or path.resolve().is_relative_to(harness_root.resolve()):
            continue
        volumes.setdefault(str(path), {"bind": str(path), "mode": "ro"})
    return volumes


def container_argv(argv: tuple[str, ...]) -> list[str]:
    """Listen on every interface of the container's namespace; publishing keeps it on host loopback."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--host" and i + 1 < len(out):
            out[i + 1] = "0.0.0.0"
        elif arg.startswith("--host="):
            out[i] = "--host=0.0.0.0"
    return out


def device_requests(gpus: tuple[int, ...]) -> list:
    if not gpus:
        return []
    import docker

    return [docker.types.DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]


class _LogPump(threading.Thread):
    """Copies the container's output to the log file as it arrives (flushed per chunk)."""

    def __init__(self, container, log_path: Path):
        super().__init__(daemon=True, name=f"logs-{container.short_id}")
        self.container, self.log_path = container, log_path

    def run(self) -> None:
        with open(self.log_path, "ab", buffering=0) as out:
            try:
                for chunk in self.container.logs(stream=True, follow=True, stdout=True, stderr=True):
                    out.write(chunk)
            except Exception as exc:  # the engine closed the stream; note it, never lose what came before
                out.write(f"\n[infkit] log stream ended: {exc}\n".encode())


class DockerHandle(ServerHandle):
    def __init__(self, container, spec: ServerSpec, log_path: Path, image: dict[str, Any]):
        self.container, self.spec = container, spec
        self.base_url = f"http://127.0.0.1:{spec.port}"
        self.log_path, self.image = log_path, image
        self._pump = _LogPump(container, log_path)
        self._pump.start()
        self._exit: int | None = None

    def _status(self) -> str:
        try:
            self.container.reload()
        except Exception:
            return "gone"
        return self.container.status

    def alive(self) -> bool:
        return self._status() in ("created", "running", "restarting")

    def wait_healthy(self, timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
        url = self.base_url + self.spec.health_path
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                self._pump.join(timeout=5)  # the stream ends with the container: take its last lines
                raise ServerStartError(f"container exited before {url} answered:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ServerStartError(f"{url} did not answer 200 within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def memory_bytes(self) -> int | None:
        try:
            stats = self.container.stats(stream=False)
        except Exception:
            return None
        mem = stats.get("memory_stats") or {}
        usage = mem.get("usage")
        if usage is None:
            return None
        inactive = (mem.get("stats") or {}).get("inactive_file", 0)  # page cache the kernel can drop
        return int(usage - inactive)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self._exit is not None:
            return self._exit
        try:
            if self.alive():
                self.container.kill(signal="SIGINT")
            try:
                self._exit = int(self.container.wait(timeout=timeout_s).get("StatusCode", -1))
            except Exception:
                self.container.kill(signal="SIGKILL")
                self._exit = int(self.container.wait(timeout=30).get("StatusCode", -1))
        finally:
            self._pump.join(timeout=5)
            try:
                self.container.remove(force=True)
            except Exception:
                pass
        return self._exit


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(self, settings: DockerSettings | None = None, api=None):
        self.settings = settings or DockerSettings.from_env()
        self._api = api

    @property
    def api(self):
        if self._api is None:
            self._api = client()
        return self._api

    def start(self, spec: ServerSpec, run_dir: Path, log_name: str = "server.log") -> DockerHandle:
        lock = load_lock(spec.role)
        check_gpu_request(lock, spec.gpus, self.settings)
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        image = resolve_image(self.api, lock, self.settings.image)
        shm = spec.shm_bytes or (lock.server.shm_bytes if lock.server else DEFAULT_SHM_BYTES)
        argv = container_argv(spec.argv)
        env = {**spec.env, "INFKIT_PORT": str(spec.port), "HOME": "/tmp"}
        try:
            container = self.api.containers.run(
                image.id, entrypoint=argv[:1], command=argv[1:], detach=True, environment=env,
                ports={f"{spec.port}/tcp": ("127.0.0.1", spec.port)},
                volumes=mounts_for(spec.argv, run_dir, self.settings.harness_root),
                device_requests=device_requests(spec.gpus), shm_size=shm, working_dir=str(run_dir),
                user=f"{os.getuid()}:{os.getgid()}", labels={"io.infkit.run-dir": str(run_dir)},
            )
        except Exception as exc:
            raise InfkitError(f"the engine refused to start {lock.role}: {exc}") from exc
        return DockerHandle(container, spec, run_dir / log_name, image_record(lock, image))


register_runtime("docker", DockerRuntime)
