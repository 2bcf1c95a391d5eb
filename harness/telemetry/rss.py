"""Peak memory sampling in a background thread.

``PeakSampler`` polls any callable that returns bytes (``ServerHandle.memory_bytes``,
or ``process_tree_rss(pid)``) and keeps the peak; a probe that fails or returns None
is counted, never mistaken for zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psutil

from harness.telemetry.periodic import Periodic


def process_tree_rss(pid: int) -> int | None:
    """Resident set size of a process and all its descendants, in bytes; None when it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue  # a child that exited between listing and reading
    return total


def rss_probe(pid: int) -> Callable[[], int | None]:
    return lambda: process_tree_rss(pid)


@dataclass
class PeakSampler:
    """Sample ``probe`` every ``interval_s`` while running; ``peak_bytes`` is the largest reading."""

    probe: Callable[[], int | None]
    interval_s: float = 0.2
    peak_bytes: int | None = None
    samples: int = 0
    failures: int = 0
    _loop: Periodic | None = None

    def sample(self) -> None:
        try:
            value = self.probe()
        except Exception:  # noqa: BLE001 - a probe of a dying server may raise anything; count it
            value = None
        if value is None:
            self.failures += 1
            return
        self.samples += 1
        self.peak_bytes = value if self.peak_bytes is None else max(self.peak_bytes, int(value))

    def start(self) -> PeakSampler:
        self._loop = Periodic(self.sample, self.interval_s, "infkit-peak-sampler").start()
        return self

    def stop(self) -> int | None:
        if self._loop is not None:
            self._loop.stop()
        self.sample()
        return self.peak_bytes
