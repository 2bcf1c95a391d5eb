"""The CPU split of one run: the client's, the API server's and the engine's CPU seconds over its wall time.

``CpuWindow`` reads, at the client run's start and end, this process's CPU time (``os.times``: its
own user + system time and that of the children it reaped — the client worker processes are joined
before ``run_client`` returns, so theirs is in; with several workers it includes their start-up) and
the server's, through a probe (``ServerHandle.cpu_seconds``: the engine's processes and the rest, read
from /proc). ``cpu_details`` turns the two readings into ``details.cpu``, which the validity rule
``cpu_share_reason`` judges (docs/measurement.md, "Client CPU share").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.serving.validity import ValidityLimits, cpu_share_limit, cpu_share_reason, server_cores_left
from harness.telemetry.cputime import TreeCpu

CpuProbe = Callable[[], TreeCpu | None]


@dataclass(frozen=True)
class CpuReading:
    at_s: float  # CLOCK_MONOTONIC
    client_s: float  # this process and its reaped children, user + system
    server: TreeCpu | None


def read_cpu(probe: CpuProbe | None) -> CpuReading:
    server = None
    if probe is not None:
        try:
            server = probe()
        except Exception:  # noqa: BLE001 - a probe of a dying server may raise anything: not measured
            server = None
    t = os.times()
    return CpuReading(time.monotonic(), t.user + t.system + t.children_user + t.children_system, server)


class CpuWindow:
    """The readings at the start and the end of the client run (an interrupted run keeps what it has)."""

    def __init__(self, probe: CpuProbe | None):
        self.probe = probe
        self.start: CpuReading | None = None
        self.end: CpuReading | None = None

    def open(self) -> None:
        self.start = read_cpu(self.probe)

    def close(self) -> None:
        if self.start is not None and self.end is None:
            self.end = read_cpu(self.probe)


def _why_not(window: CpuWindow) -> str | None:
    start, end = window.start, window.end
    if window.probe is None:
        return "no server CPU probe given (the server's process tree is not known here)"
    if start is None or end is None or start.server is None or end.server is None:
        return ("the server's CPU probe returned nothing (a container runtime does not split its processes, or "
                "the server was gone)")
    if start.server.engine_s is None or end.server.engine_s is None:
        return "no engine process (vLLM's EngineCore) in the server's process tree: engine and API server not split"
    return None


def cpu_details(window: CpuWindow, limits: ValidityLimits) -> dict[str, Any]:
    """``details.cpu``: seconds per party over the run, the cores each had, the client's share and the verdict."""
    host = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = dict.fromkeys(
        ("wall_s", "client_cpu_s", "frontend_cpu_s", "engine_cpu_s", "engine_cores", "engine_cores_source",
         "cores_left", "client_frontend_cores", "client_cores", "server_cores_left", "engine_cores_used", "share",
         "limit_cores", "why", "reason"))
    out.update(host_cores=host, measured=False)
    start, end = window.start, window.end
    if start is None or end is None:
        out["why"] = "the run ended before the CPU time was first read"
        return out
    wall = end.at_s - start.at_s
    out.update(wall_s=round(wall, 3), client_cpu_s=round(end.client_s - start.client_s, 3))
    if start.server is not None and end.server is not None:
        out["frontend_cpu_s"] = round(end.server.frontend_s - start.server.frontend_s, 3)
    out["why"] = _why_not(window)
    if out["why"] is not None or wall <= 0:
        out["why"] = out["why"] or "the run took no time"
        return out
    assert end.server is not None and start.server is not None and end.server.engine_s is not None
    engine_s = round(end.server.engine_s - (start.server.engine_s or 0.0), 3)
    bound = [c for c in (end.server.engine_cores or ()) if c in host]
    demand = out["client_cpu_s"] + out["frontend_cpu_s"]
    out.update(engine_cpu_s=engine_s, engine_cores=bound or None,
               engine_cores_source="engine thread affinity" if bound else None,
               cores_left=[c for c in host if c not in bound] if bound else None,
               client_frontend_cores=round(demand / wall, 3), engine_cores_used=round(engine_s / wall, 3),
               share=round(demand / (demand + engine_s), 4) if demand + engine_s > 0 else None, measured=True)
    if not bound:  # e.g. a GPU engine: the cores it needed are not known, and a busy client may use idle ones
        out["why"] = "the engine's threads are bound to no core: which cores it needed is not known, not judged"
    out.update(client_cores=round(out["client_cpu_s"] / wall, 3),
               server_cores_left=round(server_cores_left(out), 3) if bound else None)
    out["limit_cores"] = cpu_share_limit(out, limits)
    out["reason"] = cpu_share_reason(out, limits)
    return out
