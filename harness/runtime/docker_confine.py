"""How a container is confined, and the host-side log a container can never reach.

Every container of the docker runtime gets, unless an engine needs an exception:

- **its own folder as its only read-write mount** (a server's ``servers/<log stem>/``, a harness
  command's run folder): no two containers share a writable folder, and the host's own files (server
  logs, ``servers.json``) lie outside every container's reach;
- **all capabilities dropped** and **no-new-privileges** (a setuid binary in the image gains nothing);
- a **read-only root filesystem**, with a tmpfs for ``/tmp`` and one for the caches and ``HOME``
  (``CACHE_MOUNT``): caches are per container, never one read-write folder shared across runs
  (``INFKIT_CONTAINER_WRITABLE_ROOT=1`` is the exception for an image that writes elsewhere). Each tmpfs
  states ``exec`` or ``noexec`` itself: Docker Engine starts every ``HostConfig.Tmpfs`` from
  ``noexec,nosuid,nodev`` and merges the options given, podman adds ``noexec`` only when none are given,
  so an option left unsaid means different mounts on the two engines. The cache tmpfs is ``exec``:
  Triton ``dlopen``s the launcher it compiles into ``TRITON_CACHE_DIR``, TorchInductor and JIT kernels
  (FlashInfer, DeepGEMM under ``HOME``) load from there too; ``/tmp`` stays ``noexec``;
- **no network** for a command that needs none; a server keeps the engine's bridge network, because
  its port is published to the host's loopback through it — engines publish no port of an internal
  network, so a server's egress is an exception, stated in its record; a server that must reach peers
  on the host's addresses (a group member, a Ray driver joining ``RAY_ADDRESS``) runs in the host's
  network namespace, the other exception its record states.

``Confinement.record()`` is what ``servers.json`` (through the handle) says of each of these.

A server's log is created by the host before the container starts (``HostLog``: ``O_CREAT|O_EXCL|
O_NOFOLLOW``), in a folder no container mounts, and only ever written and read through the descriptor
kept then: a link planted anywhere cannot turn the log into another host file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InfkitError

CACHE_MOUNT = "/var/cache/infkit"  # HOME and every cache of a container: a tmpfs of its own
TMP_TMPFS = "rw,noexec,nosuid,nodev,size=1g,mode=1777"
CACHE_TMPFS = "rw,exec,nosuid,nodev,size=4g,mode=1777"  # compiled kernels load from here (module doc)
TMPFS = {"/tmp": TMP_TMPFS, CACHE_MOUNT: CACHE_TMPFS}
NO_NEW_PRIVILEGES = "no-new-privileges"
WRITABLE_ROOT_ENV = "INFKIT_CONTAINER_WRITABLE_ROOT"
MAX_TAIL_BYTES = 256 * 1024
LOG_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Confinement:
    """The isolation a container runs under (see the module doc)."""

    writable: Path  # the container's own folder: its only read-write mount
    network: str | None = "none"  # None: the engine's bridge (a server's published port needs it); "host"
    read_only_root: bool = True

    @classmethod
    def for_container(cls, writable: Path, *, network: bool, environ: dict[str, str] | None = None,
                      host_network: bool = False) -> Confinement:
        env = os.environ if environ is None else environ
        mode = "host" if host_network else None if network else "none"
        return cls(writable, mode, env.get(WRITABLE_ROOT_ENV) != "1")

    def options(self) -> dict[str, Any]:
        """Docker SDK ``containers.run`` keyword arguments."""
        opts: dict[str, Any] = {"cap_drop": ["ALL"], "security_opt": [NO_NEW_PRIVILEGES],
                                "read_only": self.read_only_root,
                                "tmpfs": dict(TMPFS)}
        if self.network is not None:
            opts["network_mode"] = self.network
        return opts

    def record(self) -> dict[str, Any]:
        """What the run records of it (servers.json), exceptions named."""
        exceptions = []
        if self.network is None:
            exceptions.append("network: the engine's bridge, so the server's port can be published on the host's "
                              "loopback; egress is not blocked (engines publish no port of an internal network)")
        if self.network == "host":
            exceptions.append("network: the host's, so peers reach it on the host's addresses (a group member, or a "
                              "Ray driver joining a cluster); no port is published and egress is not blocked")
        if not self.read_only_root:
            exceptions.append(f"root filesystem writable (${WRITABLE_ROOT_ENV}=1)")
        return {"capabilities": "all dropped", "no_new_privileges": True, "read_only_root": self.read_only_root,
                "tmpfs": dict(TMPFS), "caches": f"per container, tmpfs at {CACHE_MOUNT}",
                "network": self.network or "bridge", "writable_mounts": [str(self.writable)],
                "exceptions": exceptions}


class HostLog:
    """A log file made by the host before a container starts and used only through its descriptor."""

    def __init__(self, folder: Path, name: str):
        stem, dot, suffix = name.rpartition(".")
        stem, suffix = (stem, f".{suffix}") if dot else (name, "")
        for n in range(1, 100):  # a server started again under the same name gets a log of its own
            path = folder / (name if n == 1 else f"{stem}.{n}{suffix}")
            try:
                self.fd = os.open(path, LOG_FLAGS, 0o644)
            except FileExistsError:
                continue
            except OSError as exc:
                raise InfkitError(f"cannot create the server log {path}: {exc.strerror or exc}") from None
            self.path = path
            return
        raise InfkitError(f"cannot create a server log for {name} in {folder}: 99 logs of that name exist")

    @property
    def stem(self) -> str:
        return self.path.name.rpartition(".")[0] or self.path.name

    def write(self, data: bytes) -> None:
        if self.fd < 0:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines, read through the descriptor (at most ``MAX_TAIL_BYTES``)."""
        if self.fd < 0:
            return ""
        try:
            size = os.fstat(self.fd).st_size
            start = max(0, size - MAX_TAIL_BYTES)
            data = os.pread(self.fd, size - start, start)
        except OSError:
            return ""
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Close the descriptor (the handle keeps it open for reading its tail after a stop)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            self.close()
