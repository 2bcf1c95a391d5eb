"""A server group: several processes that together are one server variant.

vLLM's own multi-node launch (a head that serves HTTP plus headless followers), data-parallel
replicas spread by the client, and a Ray cluster whose actors own replicas all need more
than one process. A ``GroupSpec`` lists them as members, each a ``ServerSpec`` run by the
same runtime, started in order (a member may first wait for a TCP port of the one before:
a Ray head must listen before a worker joins; members sharing a GPU wait for the one before to be
healthy). ``GroupHandle`` is a ``ServerHandle``: it is
healthy when every member that serves answers its health path, alive while every member
is, its memory is the sum of the members' and stopping it stops them all, last first.

``endpoints`` are the base URLs the client sends to: one (the head's) or several, spread
by the client (``spread="client"``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.errors import InvalidInput
from harness.runtime.base import Runtime, ServerHandle, ServerSpec, ServerStartError
from harness.telemetry.cputime import TreeCpu, sum_tree_cpu

POLL_S = 0.5
HEARTBEAT_S = 15.0


@dataclass(frozen=True)
class GroupMember:
    """One process of a group: what it runs, the URLs it serves (none for a follower) and when it is ready."""

    name: str
    spec: ServerSpec
    urls: tuple[str, ...] = ()  # base URLs this member serves, health-checked at spec.health_path
    ready_port: int | None = None  # a TCP port it must accept on before the next member starts
    role: str = "server"  # head, follower, replica, ray-head, ray-worker, ray-driver: recorded
    # healthy before the next member starts: replicas sharing a GPU (vLLM sizes its KV cache from the device's
    # free memory and counts every change during its profiling as its own, so concurrent starts shrink each other)
    healthy_first: bool = False


@dataclass(frozen=True)
class GroupSpec:
    """The members of a group and how the client reaches it."""

    members: tuple[GroupMember, ...]
    spread: Literal["one", "client"] = "one"  # one endpoint, or the client spreads requests over all of them
    description: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # launch facts for the record (world size, nodes, ...)
    engine: ServerSpec | None = None  # the engine's command a result records (default: the first serving member's)

    def __post_init__(self) -> None:
        if not self.members:
            raise InvalidInput("a server group needs at least one member")
        if not any(m.urls for m in self.members):
            raise InvalidInput("a server group needs a member that serves HTTP")

    @property
    def engine_spec(self) -> ServerSpec:
        return self.engine or next(m.spec for m in self.members if m.urls)

    @property
    def endpoints(self) -> tuple[str, ...]:
        urls = tuple(u for m in self.members for u in m.urls)
        return urls if self.spread == "client" else urls[:1]


def tcp_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    from harness.runtime.local import http_ok as ok

    return ok(url, timeout_s)


class GroupHandle(ServerHandle):
    """Every member's handle; healthy, alive and stopped together."""

    def __init__(self, group: GroupSpec, handles: list[ServerHandle], log_dir: Path):
        self.group, self.handles = group, handles
        self.base_url = group.endpoints[0]
        self.endpoints = group.endpoints
        head = next(h for m, h in zip(group.members, handles, strict=False) if m.urls)
        self.log_path = head.log_path
        self.image = head.image
        self.log_dir = log_dir

    @property
    def pid(self) -> int | None:
        return self.handles[0].pid if self.handles else None

    def members(self) -> list[tuple[GroupMember, ServerHandle]]:
        return list(zip(self.group.members, self.handles, strict=False))

    def dead(self) -> tuple[GroupMember, ServerHandle] | None:
        return next(((m, h) for m, h in self.members() if not h.alive()), None)

    def alive(self) -> bool:
        return len(self.handles) == len(self.group.members) and self.dead() is None

    def log_tail(self, lines: int = 40) -> str:
        """Each member's last lines, the head's first, each under its name."""
        share = max(5, lines // max(1, len(self.handles)))
        return "\n".join(f"--- {m.name} ({h.log_path.name}) ---\n{h.log_tail(share)}" for m, h in self.members())

    def latest_line(self) -> str:
        """The last line of the log written most recently (a member's, or a replica's a Ray driver started)."""
        from harness.runtime.local import read_tail

        paths = [h.log_path for h in self.handles]
        if any(m.role == "ray-driver" for m in self.group.members):
            paths += sorted(self.log_dir.glob("server-replica*.log"))
        existing = [p for p in paths if p.exists()]
        return read_tail(max(existing, key=lambda p: p.stat().st_mtime), 1) if existing else ""

    def memory_bytes(self) -> int | None:
        values = [h.memory_bytes() for h in self.handles]
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    def cpu_seconds(self) -> TreeCpu | None:
        return sum_tree_cpu([h.cpu_seconds() for h in self.handles])

    def wait_healthy(self, timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
        started = time.monotonic()
        next_beat = started + HEARTBEAT_S
        waiting = [(m, u) for m in self.group.members for u in m.urls]
        while True:
            gone = self.dead()
            if gone is not None:
                member, handle = gone
                raise ServerStartError(f"group member {member.name} exited before the group became healthy; "
                                       f"log {handle.log_path}, last lines:\n" + self.log_tail(30))
            waiting = [(m, u) for m, u in waiting if not http_ok(u + m.spec.health_path)]
            if not waiting and self.dead() is None:
                return
            now = time.monotonic()
            if now - started > timeout_s:
                names = ", ".join(f"{m.name} {u}" for m, u in waiting)
                raise ServerStartError(f"group not healthy after {timeout_s:.0f} s (waiting for {names}); "
                                       "last lines:\n" + self.log_tail(30))
            if progress and now >= next_beat:
                progress(f"  still starting ({now - started:.0f} s, {len(waiting)} endpoint(s) to go): "
                         f"{self.latest_line()[:120]}")
                next_beat = now + HEARTBEAT_S
            time.sleep(POLL_S)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """Stop every member, the last started first; the first member's exit status."""
        statuses = [h.stop(timeout_s) for h in reversed(self.handles)]
        return statuses[-1] if statuses else None

    def kill(self) -> None:
        """End every member at once, the last started first (the last resort of a second stop signal)."""
        for handle in reversed(self.handles):
            kill = getattr(handle, "kill", None)
            if callable(kill):
                kill()
            else:
                handle.stop(1.0)


def start_group(runtime: Runtime, group: GroupSpec, log_dir: Path, prefix: str, *, ready_timeout_s: float = 120.0,
                health_timeout_s: float = 1800.0, progress: Callable[[str], None] | None = None) -> GroupHandle:
    """Start the members in order under ``runtime`` (a ``healthy_first`` member answers its health path before the
    next starts); on any failure, stop those already started."""
    handles: list[ServerHandle] = []
    try:
        for member in group.members:
            handle = runtime.start(member.spec, log_dir, log_name=f"server-{prefix}-{member.name}.log")
            handles.append(handle)
            if member.healthy_first and member is not group.members[-1]:
                if progress:
                    progress(f"  {member.name}: waiting for its health before the next member starts (shared GPU)")
                handle.wait_healthy(health_timeout_s, progress=progress)
            if member.ready_port is not None:
                deadline = time.monotonic() + ready_timeout_s
                while not tcp_open(member.spec.host, member.ready_port):
                    if not handle.alive() or time.monotonic() > deadline:
                        raise ServerStartError(
                            f"group member {member.name} did not listen on port {member.ready_port}; "
                            f"log {handle.log_path}, last lines:\n{handle.log_tail(25)}")
                    time.sleep(POLL_S)
    except BaseException:
        for handle in reversed(handles):
            handle.stop()
        raise
    return GroupHandle(group, handles, Path(log_dir))
