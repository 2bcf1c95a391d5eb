"""CPU time of a server's process tree, split into the engine and its frontend (the API server).

vLLM V1 runs its engine in processes of their own, named by ``setproctitle``: ``VLLM::EngineCore``
(``VLLM::EngineCore_DP0`` … under data parallelism) and its workers (``VLLM::Worker``), children of
the API server process; a headless multi-node follower has no EngineCore, its ``VLLM::Worker_PP1`` runs
under its main process. ``process_tree_cpu`` reads every process of the tree once (user + system
time, plus that of children it has reaped, so a helper that exits between two readings keeps its
time); an engine process and all its descendants count as the engine, everything else as the
frontend. It also reads where the engine's threads may run: the union of the CPU affinities of
engine threads bound narrower than the server's own (vLLM binds its OpenMP threads with
``VLLM_CPU_OMP_THREADS_BIND``, ``auto`` by default); None when no engine thread is bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

ENGINE_MARKERS = ("EngineCore",)  # in a process's name, or opening an argv word as ``VLLM::EngineCore_DP0`` does
# a worker outside any EngineCore is the engine too: a headless multi-node follower runs its ``VLLM::Worker_PP1``
# directly under its main process
WORKER_PREFIX = "VLLM::Worker"


@dataclass(frozen=True)
class TreeCpu:
    """One reading of a server tree's CPU seconds (cumulative since each process started)."""

    frontend_s: float
    engine_s: float | None  # None: no engine process was recognised, so the tree is not split
    engine_processes: int = 0
    engine_cores: tuple[int, ...] | None = None  # where the engine's bound threads may run; None: not bound


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> (0, 1, 2, 5) (the kernel's cpu-list form, as ``VLLM_CPU_OMP_THREADS_BIND`` takes it)."""
    cores: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cores))


def format_cpu_list(cores: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for c in sorted(set(cores)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def _is_engine(proc: psutil.Process, markers: Sequence[str]) -> bool:
    try:
        name, argv = proc.name(), proc.cmdline()
    except psutil.Error:
        return False
    # a word that merely mentions the marker (a ``python -c`` program's text) does not make an engine
    return any(m in name or any(w.startswith(f"VLLM::{m}") for w in argv) for m in markers) or any(
        w.startswith(WORKER_PREFIX) for w in (name, *argv))


def _seconds(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0  # exited between listing and reading: its time is lost only until its parent reaps it
    return t.user + t.system + t.children_user + t.children_system


def _bound_cores(procs: Iterable[psutil.Process], allowed: frozenset[int]) -> set[int]:
    """The cores of every thread of ``procs`` whose affinity is narrower than ``allowed``."""
    cores: set[int] = set()
    for proc in procs:
        try:
            threads = proc.threads()
        except psutil.Error:
            continue
        for thread in threads:
            try:
                mine = os.sched_getaffinity(thread.id)
            except OSError:
                continue
            if mine < allowed:
                cores |= mine
    return cores


def _engine_roots(procs: Sequence[psutil.Process], markers: Sequence[str]) -> set[int]:
    """Pids of the engine processes and all their descendants."""
    engine: set[int] = set()
    for proc in procs:
        if proc.pid not in engine and _is_engine(proc, markers):
            engine.add(proc.pid)
            try:
                engine.update(c.pid for c in proc.children(recursive=True))
            except psutil.Error:
                continue
    return engine


def process_tree_cpu(pid: int, markers: Sequence[str] = ENGINE_MARKERS) -> TreeCpu | None:
    """CPU seconds of the tree rooted at ``pid``, split into engine and frontend; None when the root is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        allowed = frozenset(root.cpu_affinity())
    except psutil.Error:
        return None
    engine = _engine_roots(procs, markers)
    frontend_s = sum(_seconds(p) for p in procs if p.pid not in engine)
    if not engine:
        return TreeCpu(frontend_s=round(frontend_s, 3), engine_s=None)
    engine_procs = [p for p in procs if p.pid in engine]
    bound = _bound_cores(engine_procs, allowed)
    return TreeCpu(frontend_s=round(frontend_s, 3), engine_s=round(sum(_seconds(p) for p in engine_procs), 3),
                   engine_processes=len(engine_procs), engine_cores=tuple(sorted(bound)) if bound else None)


def cpu_probe(pid: int) -> Callable[[], TreeCpu | None]:
    return lambda: process_tree_cpu(pid)


def sum_tree_cpu(readings: Sequence[TreeCpu | None]) -> TreeCpu | None:
    """Several servers' readings as one (a group's members): seconds summed, engine cores united."""
    known = [r for r in readings if r is not None]
    if not known:
        return None
    engines = [r.engine_s for r in known if r.engine_s is not None]
    cores = {c for r in known for c in (r.engine_cores or ())}
    return TreeCpu(frontend_s=round(sum(r.frontend_s for r in known), 3),
                   engine_s=round(sum(engines), 3) if engines else None,
                   engine_processes=sum(r.engine_processes for r in known),
                   engine_cores=tuple(sorted(cores)) if cores else None)
