"""Is the host quiet? What processes that are not the kit's take from the CPU, read from /proc.

A bench measures latencies of milliseconds on a host that other jobs share: a background job niced to 19 still
takes a core, and the kit's client then sends late and its event loop lags, so arm runs come out invalid. Before
the first server start the runner reads, over a short window, each process's CPU time (``/proc/<pid>/stat``,
utime + stime, in cores), the run queue (``procs_running``) and steal (``/proc/stat``), leaving out the kit's own
processes (this one, its descendants — servers, client workers — and its ancestors). It says in one line which
processes compete (name, pid, share of a core) and what that costs, records it in run.json
(``effective.host_load``), and each invalid run's recommendation names it. ``--wait-quiet-s S`` waits up to S s for
the competing load to stop before the first start. The same reading, taken again after an invalid arm run, names
what competed then. A host without /proc says so instead of a number.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
WINDOW_S = 0.5  # long enough to see a busy process at ~1 % resolution, short enough to take before every start
MIN_SHARE = 0.05  # a process under 5 % of a core is not named
QUIET_CORES = 0.1  # the host is quiet when processes not the kit's take less than this share of its cores ...
QUIET_STEAL = 0.05  # ... and the hypervisor steals less than this share of CPU time


@dataclass(frozen=True)
class Competitor:
    name: str
    pid: int
    share: float  # cores: 1.0 is one core busy for the whole window


@dataclass(frozen=True)
class HostLoad:
    """One reading of the host's CPU load by processes that are not the kit's."""

    measured: bool
    window_s: float = 0.0
    cores: int = 0
    others_cores: float = 0.0  # CPU of every process not the kit's, in cores
    competitors: tuple[Competitor, ...] = ()  # those over MIN_SHARE, busiest first
    run_queue: int | None = None  # runnable tasks at the end of the window (this reader included)
    steal_share: float | None = None
    reason: str = ""  # why it was not measured

    @property
    def quiet(self) -> bool:
        return (not self.measured or self.others_cores < QUIET_CORES * self.cores
                and (self.steal_share or 0.0) < QUIET_STEAL)

    def who(self) -> str:
        """The competing processes, as 'name (pid N, S % of a core)'."""
        return ", ".join(f"{c.name} (pid {c.pid}, {c.share:.0%} of a core)" for c in self.competitors[:5])

    def line(self, wait_flag: str = "--wait-quiet-s") -> str:
        """One line: who competes and what it costs (or that the host is quiet, or why it was not measured)."""
        if not self.measured:
            return f"host load not measured: {self.reason}"
        load = (f"processes not the kit's use {self.others_cores:.2f} of {self.cores} cores"
                f"{f': {self.who()}' if self.competitors else ''}; run queue {self.run_queue}, steal "
                f"{(self.steal_share or 0.0):.0%}")
        if self.quiet:
            return f"host quiet: {load}"
        return (f"host not quiet: {load}: expect invalid runs (late sends, client loop lag) and slower, noisier "
                f"figures; stop them, or {wait_flag} S waits up to S s for them to stop")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "quiet": self.quiet, "line": self.line()}


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(name, ppid, utime + stime in ticks) of a process, or None when it is gone or unreadable."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return name, int(rest[1]), int(rest[11]) + int(rest[12])


def _processes() -> dict[int, tuple[str, int, int]]:
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (st := _stat(entry.name)) is not None:
            out[int(entry.name)] = st
    return out


def _cpu_times() -> tuple[list[int], int | None]:
    """The aggregate 'cpu' line's fields and procs_running, from /proc/stat."""
    fields, running = [], None
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:]]
        elif line.startswith("procs_running"):
            running = int(line.split()[1])
    return fields, running


def kit_pids(processes: dict[int, tuple[str, int, int]], me: int) -> set[int]:
    """This process, its descendants and its ancestors: the kit's own (and what launched it)."""
    own, parent = {me}, processes.get(me, ("", 0, 0))[1]
    while parent > 1 and parent not in own:
        own.add(parent)
        parent = processes.get(parent, ("", 0, 0))[1]
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in own:
                own.add(child)
                todo.append(child)
    return own


def host_load(window_s: float = WINDOW_S, me: int | None = None) -> HostLoad:
    """One reading over ``window_s`` (module docstring); unmeasured where /proc cannot be read."""
    if not (PROC / "stat").is_file():
        return HostLoad(False, reason="no /proc/stat on this host")
    me = os.getpid() if me is None else me
    before, (cpu0, _) = _processes(), _cpu_times()
    time.sleep(window_s)
    after, (cpu1, running) = _processes(), _cpu_times()
    own, tick = kit_pids(after, me) | kit_pids(before, me), os.sysconf("SC_CLK_TCK")
    shares = [Competitor(name, pid, (ticks - before[pid][2]) / tick / window_s)
              for pid, (name, _, ticks) in after.items() if pid in before and pid not in own]
    total = sum(b - a for a, b in zip(cpu0, cpu1[:8], strict=False)) if cpu0 and cpu1 else 0
    steal = (cpu1[7] - cpu0[7]) / total if total and len(cpu1) > 7 else None
    busy = sorted((c for c in shares if c.share >= MIN_SHARE), key=lambda c: -c.share)
    return HostLoad(True, window_s, os.cpu_count() or 1, round(sum(max(0.0, c.share) for c in shares), 3),
                    tuple(Competitor(c.name, c.pid, round(c.share, 3)) for c in busy), running,
                    None if steal is None else round(steal, 4))


def wait_quiet(max_wait_s: float, say: Any = None, window_s: float = WINDOW_S) -> Iterable[HostLoad]:
    """Readings until the host is quiet or ``max_wait_s`` has passed (at least one); ``say`` gets each line."""
    deadline = time.monotonic() + max_wait_s
    while True:
        load = host_load(window_s)
        if say is not None:
            say(load.line())
        yield load
        if load.quiet or time.monotonic() + window_s > deadline:
            return
