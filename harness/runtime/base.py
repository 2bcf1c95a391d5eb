"""The runtime interface shared by the local (subprocess) and docker (SDK) runners.

A backend turns its config into a ``ServerSpec`` (what to run); a runtime turns
a spec into a running ``ServerHandle`` (where it runs). Bench code only talks
to these two types, so ``RUNTIME=docker BACKEND=vllm`` differs from the CPU
default only in configuration.
"""

from __future__ import annotations

import abc
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InvalidInput
from harness.images.engine import docker_engine_present
from harness.runtime.gpus import Device
from harness.telemetry.cputime import TreeCpu

HARNESS_MOUNT = "/opt/infkit"  # where every container sees the harness, read-only


@dataclass(frozen=True)
class ServerSpec:
    """What to launch, independent of where."""

    argv: tuple[str, ...]  # command line as run inside the runtime
    port: int
    env: dict[str, str] = field(default_factory=dict)
    role: str = "inf-vllm-cpu"  # environment role (image) for the docker runtime
    health_path: str = "/health"
    gpus: tuple[Device, ...] = ()  # device indexes or MIG instances (harness.runtime.gpus); empty = CPU only
    shm_bytes: int | None = None
    host: str = "127.0.0.1"
    host_network: bool = False  # containers: the host's network and IPC namespaces (group members that talk)
    placement: dict[str, Any] | None = None  # where the engine's threads run and which cores it leaves (CPU backends)


class ServerHandle(abc.ABC):
    """A running server: health, logs, memory, stop."""

    base_url: str
    log_path: Path
    image: dict[str, Any] | None = None  # {"ref": ..., "digest": ...} when run from an image
    owns_process: bool = True  # False: a server the user runs (``harness.runtime.external``): never stopped here

    @abc.abstractmethod
    def wait_healthy(self, timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
        """Block until the health endpoint answers 200; raise ``ServerStartError`` with the log tail if it dies or
        times out.

        ``progress`` gets a line now and then while the server is still starting (a first start compiles for minutes).
        """

    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    def log_tail(self, lines: int = 40) -> str: ...

    @abc.abstractmethod
    def memory_bytes(self) -> int | None:
        """Current resident memory of the server (process tree RSS locally, container usage in docker)."""

    def cpu_seconds(self) -> TreeCpu | None:
        """CPU seconds of the server so far, split into engine and frontend; None where not measured."""
        return None

    @abc.abstractmethod
    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGINT, then SIGKILL of the whole group after ``timeout_s``; returns the exit status."""

    @property
    def pid(self) -> int | None:
        return None


class ServerStartError(InvalidInput):
    """The server exited or never became healthy; the message carries the log tail."""


class Runtime(abc.ABC):
    name: str

    @abc.abstractmethod
    def start(self, spec: ServerSpec, run_dir: Path, log_name: str = "server.log") -> ServerHandle: ...


def get_runtime(name: str) -> Runtime:
    """A runtime by name: each module of ``harness.runtime`` exporting ``RUNTIME`` (its class) is discovered."""
    from harness.registry import lookup

    return lookup("harness.runtime", "RUNTIME", Runtime, name, "runtime")()


def nvidia_gpu_present() -> bool:
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def default_runtime_name() -> str:
    """docker where an engine and an NVIDIA GPU are present, else local."""
    return "docker" if docker_engine_present() and nvidia_gpu_present() else "local"
