"""The ``docker`` runtime: a role's pinned image through the Docker Engine API.

Works against any engine that speaks that API (Docker, or podman's
``podman system service`` through ``DOCKER_HOST``). A container always has:

- the harness mounted read-only at ``/opt/infkit`` (never baked into the image);
- its own folder (``servers/<log stem>/`` beside its log) as its only read-write mount,
  at the same path as on the host, and any other existing absolute path named on the
  command line (a model directory) mounted read-only at its own path, so a spec's argv
  means the same inside;
- the confinement of ``harness.runtime.docker_confine`` (capabilities dropped,
  no-new-privileges, read-only root with tmpfs caches), recorded in servers.json;
- its server port published on 127.0.0.1 only (the server listens on 0.0.0.0
  inside the container's own network namespace);
- ``GPU=N`` as a device request, shared memory sized from the spec or the lock;
- its logs copied as they arrive into a log the host created before the start and
  keeps open (``HostLog``), outside every container's mounts.

Every container runs as the invoking user (or ``DockerSettings.user``) with ``USER``,
``HOME`` and the compile caches set for a uid the image may not know (``container_env``).
Before a CUDA role starts, the host driver is checked (``harness.images.driver``); the
image is resolved, or built on first use, by ``harness.runtime.docker_image``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing, InfkitError
from harness.images.locks import REPO_ROOT, load_lock
from harness.runtime.base import (
    HARNESS_MOUNT,
    Runtime,
    ServerHandle,
    ServerSpec,
    ServerStartError,
)
from harness.runtime.docker_confine import CACHE_MOUNT, Confinement, HostLog
from harness.runtime.docker_image import (
    ImageSource,
    check_gpu_request,
    client,
    holds_image,
    image_record,
    image_source,
    notify_stderr,
    resolve_image,
)
from harness.runtime.gpus import Device

DEFAULT_SHM_BYTES = 1 << 30
CONTAINER_USER_NAME = "infkit"


@dataclass(frozen=True)
class DockerSettings:
    """Runtime switches, read once from the environment (documented in docs/images.md)."""

    image: str | None = None  # INFKIT_IMAGE: run this reference instead of the role's lock
    # INFKIT_CUDA_FORWARD_COMPAT=1: the driver is below CUDA minor-version compatibility's minimum
    # and the CUDA forward-compatibility package is installed (data-centre GPUs)
    forward_compat: bool = False
    pull_only: bool = False  # INFKIT_PULL_ONLY=1 (make PULL_ONLY=1): never build a missing role image
    base_image: str | None = None  # INFKIT_LOCAL_BASE_IMAGE: the base of a build on first use
    user: str | None = None  # uid:gid the containers run as; None: the invoking user's
    harness_root: Path = REPO_ROOT

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> DockerSettings:
        env = os.environ if environ is None else environ
        return cls(image=env.get("INFKIT_IMAGE") or None, forward_compat=env.get("INFKIT_CUDA_FORWARD_COMPAT") == "1",
                   pull_only=env.get("INFKIT_PULL_ONLY") == "1", base_image=env.get("INFKIT_LOCAL_BASE_IMAGE") or None)

    @property
    def uid_gid(self) -> tuple[int, int]:
        if self.user:
            uid, _, gid = self.user.partition(":")
            return int(uid), int(gid or uid)
        return os.getuid(), os.getgid()


def container_env() -> dict[str, str]:
    """User, home and cache locations that work for a uid with no passwd entry in the image.

    ``getpass.getuser()`` (torch's compile cache, among others) reads ``LOGNAME``/``USER``
    before it asks ``getpwuid``, which raises ``KeyError`` for an unknown uid; every cache a
    server or a compile writes goes under the writable cache mount, not ``/tmp/<user>``.
    """
    return {
        "USER": CONTAINER_USER_NAME, "LOGNAME": CONTAINER_USER_NAME, "HOME": CACHE_MOUNT,
        "XDG_CACHE_HOME": f"{CACHE_MOUNT}/xdg", "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
        "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton", "VLLM_CACHE_ROOT": f"{CACHE_MOUNT}/vllm",
        "TORCH_HOME": f"{CACHE_MOUNT}/torch", "HF_HOME": f"{CACHE_MOUNT}/huggingface",
        "CUDA_CACHE_PATH": f"{CACHE_MOUNT}/nv",
    }


def container_options(argv: tuple[str, ...], confinement: Confinement, settings: DockerSettings) -> dict[str, Any]:
    """What every container of the runtime gets: user, environment, mounts, working directory, confinement."""
    uid, gid = settings.uid_gid
    writable = confinement.writable
    if os.getuid() == 0 and writable.stat().st_uid != uid:
        os.chown(writable, uid, gid)  # root runs the container as another uid: that uid must write its folder
    return {"user": f"{uid}:{gid}", "environment": container_env(), "volumes": mounts_for(argv, writable,
            settings.harness_root), "working_dir": str(writable), **confinement.options()}


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
    volumes = {str(harness_root): {"bind": HARNESS_MOUNT, "mode": "ro"},
               str(run_dir): {"bind": str(run_dir), "mode": "rw"}}
    for value in (v for arg in argv for v in _path_values(arg)):
        path = Path(value)
        if not path.is_absolute() or not path.exists() or path.resolve() == Path("/"):
            continue
        if path.resolve().is_relative_to(run_dir.resolve()) or path.resolve().is_relative_to(harness_root.resolve()):
            continue
        volumes.setdefault(str(path), {"bind": str(path), "mode": "ro"})
        # a Hugging Face cache snapshot's files link to ../../blobs/: that folder is mounted too, so they resolve
        links = (p.resolve() for p in path.iterdir() if p.is_symlink()) if path.is_dir() else iter(())
        for target in {t.parent for t in links if t.exists() and not t.is_relative_to(path.resolve())}:
            volumes.setdefault(str(target), {"bind": str(target), "mode": "ro"})
    return volumes


def planned_mounts(argv: tuple[str, ...], host_network: bool = False) -> dict[str, Any]:
    """A server container's mounts as a dry run shows them: each bind with its mode, each tmpfs with its options
    (``<run>``: the run folder a start makes), the root's mode and the network."""
    folder = Path("<run>/servers/<server>")
    confinement = Confinement.for_container(folder, network=True, host_network=host_network)
    binds = [{"host": host, "container": v["bind"], "mode": v["mode"]}
             for host, v in mounts_for(argv, folder, REPO_ROOT).items()]
    record = confinement.record()
    return {"binds": binds, "tmpfs": record["tmpfs"], "read_only_root": record["read_only_root"],
            "network": record["network"]}


def container_argv(argv: tuple[str, ...]) -> list[str]:
    """Listen on every interface of the container's namespace; publishing keeps it on host loopback."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--host" and i + 1 < len(out):
            out[i + 1] = "0.0.0.0"
        elif arg.startswith("--host="):
            out[i] = "--host=0.0.0.0"
    return out


def device_requests(gpus: tuple[Device, ...]) -> list:
    """Each device as the engine's device id: an index, or a MIG instance's UUID or ``N:M`` as given."""
    if not gpus:
        return []
    import docker

    return [docker.types.DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]


def network_options(spec: ServerSpec) -> dict[str, Any]:
    """Group members that talk to each other (torch.distributed, shared memory) share the host's network and IPC;
    a lone server has its own namespace and its port published on host loopback."""
    if spec.host_network:
        return {"network_mode": "host", "ipc_mode": "host"}
    return {"ports": {f"{spec.port}/tcp": ("127.0.0.1", spec.port)}}


def engine_is_podman(api) -> bool:
    """Whether the Engine API answering is podman's compatibility service (``GET /version``'s components)."""
    try:
        info = api.version()
    except Exception:
        return False
    return any("podman" in str(c.get("Name", "")).lower() for c in info.get("Components") or [])


PODMAN_GPUS = ("podman's Docker-compatible API ignores GPU device requests (podman issue 22645), so this GPU role "
               "would start without a GPU: use Docker with the NVIDIA container toolkit, or podman's own CLI with CDI "
               "(podman run --device nvidia.com/gpu=N)")


def refuse_podman_gpus(api) -> None:
    """Podman's Docker-compatible API ignores DeviceRequests: a GPU role started there would have no GPU."""
    if engine_is_podman(api):
        raise CapabilityMissing(PODMAN_GPUS)


def engine_api():
    """The engine's API client, or None where none answers (a start then says why)."""
    try:
        return client()
    except CapabilityMissing:
        return None


def image_sources(roles: Iterable[str], gpus: bool, *, settings: DockerSettings | None = None,
                  api=None) -> dict[str, ImageSource]:
    """Each role's image source, decided before any start (``image_source``); ``api`` None: the engine is not
    asked and a fresh host is planned. A CUDA role given GPUs on podman's API cannot be had: no GPU would reach it."""
    s = settings or DockerSettings.from_env()
    present = None if api is None else (lambda ref: holds_image(api, ref))
    podman = gpus and api is not None and engine_is_podman(api)
    out = {}
    for role in dict.fromkeys(roles):
        lock = load_lock(role)
        found = image_source(lock, s.image, pull_only=s.pull_only, base_image=s.base_image, present=present)
        out[role] = replace(found, missing=PODMAN_GPUS) if podman and lock.cuda and not found.missing else found
    return out


def memory_in_use_bytes(mem: dict[str, Any]) -> int | None:
    """Usage minus the page cache the kernel can drop, as the docker CLI computes it.

    cgroup v1 reports that cache as ``total_inactive_file`` (``inactive_file`` there is the
    cgroup's own share only); cgroup v2 as ``inactive_file``.
    """
    usage = mem.get("usage")
    if usage is None:
        return None
    stats = mem.get("stats") or {}
    inactive = stats["total_inactive_file"] if "total_inactive_file" in stats else stats.get("inactive_file", 0)
    return int(usage - inactive) if inactive < usage else int(usage)


class _LogPump(threading.Thread):
    """Copies the container's output to its host log as it arrives (through the kept descriptor)."""

    def __init__(self, container, log: HostLog):
        super().__init__(daemon=True, name=f"logs-{container.short_id}")
        self.container, self.log = container, log

    def run(self) -> None:
        try:
            for chunk in self.container.logs(stream=True, follow=True, stdout=True, stderr=True):
                self.log.write(chunk)
        except Exception as exc:  # the engine closed the stream; note it, never lose what came before
            self.log.write(f"\n[infkit] log stream ended: {exc}\n".encode())


class DockerHandle(ServerHandle):
    def __init__(
        self, container, spec: ServerSpec, log: HostLog, image: dict[str, Any], confinement: Confinement | None = None
    ):
        self.container, self.spec = container, spec
        self.base_url = f"http://127.0.0.1:{spec.port}"
        self.log, self.log_path, self.image = log, log.path, image
        self.confinement = confinement.record() if confinement else None  # servers.json records it
        self._pump = _LogPump(container, log)
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
        return self.log.tail(lines)

    def memory_bytes(self) -> int | None:
        try:
            stats = self.container.stats(stream=False)
        except Exception:
            return None
        return memory_in_use_bytes(stats.get("memory_stats") or {})

    def cpu_seconds(self) -> None:
        """Not measured: the container's processes live in its own PID namespace (and maybe another host), so
        its engine and API server cannot be told apart from here; the result says the CPU share was not judged."""
        return None

    def _signal(self, name: str) -> None:
        import docker

        try:
            self.container.kill(signal=name)
        except docker.errors.APIError:
            pass  # it exited between the status check and the signal: wait() returns its status

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self._exit is not None:
            return self._exit
        try:
            if self.alive():
                self._signal("SIGINT")
            try:
                self._exit = int(self.container.wait(timeout=timeout_s).get("StatusCode", -1))
            except Exception:  # still running after timeout_s (the SDK raises a transport timeout)
                self._signal("SIGKILL")
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

    def __init__(self, settings: DockerSettings | None = None, api=None, notify=notify_stderr):
        self.settings = settings or DockerSettings.from_env()
        self._api = api
        self.notify = notify

    @property
    def api(self):
        if self._api is None:
            self._api = client()
        return self._api

    def start(self, spec: ServerSpec, run_dir: Path, log_name: str = "server.log") -> DockerHandle:
        lock = load_lock(spec.role)
        s = self.settings
        driver = check_gpu_request(lock, spec.gpus, s.forward_compat, self.notify)
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        image = resolve_image(
            self.api, lock, s.image, pull_only=s.pull_only, log_dir=run_dir, base_image=s.base_image, notify=self.notify
        )
        shm = spec.shm_bytes or (lock.server.shm_bytes if lock.server else DEFAULT_SHM_BYTES)
        if spec.gpus:
            refuse_podman_gpus(self.api)
        argv = list(spec.argv) if spec.host_network else container_argv(spec.argv)
        where = network_options(spec)
        log = HostLog(run_dir, log_name)  # before the container exists; never opened by path again
        folder = run_dir / log.stem
        try:
            folder.mkdir()
        except OSError as exc:
            log.close()
            raise InfkitError(f"cannot create the container folder {folder}: {exc.strerror or exc}") from None
        confinement = Confinement.for_container(folder, network=True, host_network=spec.host_network)
        opts = container_options(spec.argv, confinement, s)
        opts["environment"] |= {**spec.env, "INFKIT_PORT": str(spec.port)}
        if driver and driver.warning:  # the server log says which compatibility mechanism it ran under
            log.write(f"[infkit] {driver.mechanism}: {driver.warning}\n".encode())
        try:
            container = self.api.containers.run(
                image.id,
                entrypoint=argv[:1],
                command=argv[1:],
                detach=True,
                device_requests=device_requests(spec.gpus),
                shm_size=shm,
                labels={"io.infkit.run-dir": str(run_dir)},
                **{**opts, **where},
            )
        except Exception as exc:
            log.close()
            raise InfkitError(f"the engine refused to start {lock.role}: {exc}") from exc
        return DockerHandle(container, spec, log, image_record(lock, image), confinement)


RUNTIME = DockerRuntime
