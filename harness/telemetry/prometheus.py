"""Prometheus ``/metrics`` scraping and parsing (``prometheus_client.parser``, the reference parser).

A ``Snapshot`` maps every sample (name + labels) to its value. Series are summed over
label sets (several engines or models behind one endpoint) except for the histogram
bucket label ``le``. A series that is not in a snapshot is absent — never zero.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0
# A poll that answers late is still a reading: a loaded server's /metrics can take over a second on 2 cores.
POLL_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Snapshot:
    """Parsed samples: ``(sample name, ((label, value), ...))`` → value."""

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    taken_s: float = 0.0  # time.monotonic() at the scrape

    def total(self, name: str) -> float | None:
        """Sum of a sample over all label sets; None when absent."""
        values = [v for (n, _), v in self.samples.items() if n == name]
        return math.fsum(values) if values else None

    def buckets(self, name: str) -> dict[float, float] | None:
        """Cumulative histogram buckets ``le → count`` summed over other labels; None when absent."""
        out: dict[float, float] = {}
        for (n, labels), v in self.samples.items():
            if n == f"{name}_bucket":
                le = float(dict(labels)["le"])
                out[le] = out.get(le, 0.0) + v
        return out or None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """A sample's values per value of ``label``, summed over its other labels; empty when absent."""
        out: dict[str, float] = {}
        for (n, labels), v in self.samples.items():
            if n == name and label in dict(labels):
                key = dict(labels)[label]
                out[key] = out.get(key, 0.0) + v
        return out

    def names(self) -> set[str]:
        return {n for n, _ in self.samples}


def parse(text: str, taken_s: float = 0.0, only: frozenset[str] | None = None) -> Snapshot:
    """Samples of a Prometheus text page; a NaN or infinite sample is left out (absent, never a number:
    it could not be written into a JSON result, and no delta or peak of it means anything). ``only``:
    keep just these sample names (a poll parses a few gauges, not the whole page, in the client's process)."""
    if only is not None:
        text = "\n".join(line for line in text.splitlines() if _line_name(line) in only)
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = float(s.value)
            if not math.isfinite(value):
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            samples[key] = samples.get(key, 0.0) + value
    return Snapshot(samples=samples, taken_s=taken_s)


def _line_name(line: str) -> str:
    """The metric a text-format line is about: a sample's name, or the family a ``# HELP``/``# TYPE`` names."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else ""
    return line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""


@dataclass(frozen=True)
class Scrape:
    """One scrape: the raw text (kept as evidence) and its parse, or why there is none."""

    text: str | None
    snapshot: Snapshot | None
    error: str | None = None


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S, only: frozenset[str] | None = None) -> Scrape:
    """GET ``url`` and parse it (``only``: these samples); network and parse failures come back as ``error``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the user's own endpoint
            text = resp.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Scrape(None, None, f"{url}: {getattr(exc, 'reason', exc)}")
    try:
        return Scrape(text, parse(text, time.monotonic(), only))
    except (ValueError, TypeError) as exc:
        return Scrape(text, None, f"{url}: not Prometheus text format: {exc}")


@dataclass
class GaugePoller:
    """Polls ``url`` in a thread during the run; keeps each named gauge's readings in order, and the time series.

    ``series`` holds one ``(time.monotonic() at the scrape, {gauge: value})`` per successful poll.
    """

    url: str
    gauges: Iterable[str]
    interval_s: float = 0.5
    readings: dict[str, list[float]] = field(default_factory=dict)
    series: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    polls: int = 0
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def poll_timeout_s(self) -> float:
        """How long one poll waits for the server's answer: a loaded server answers late, not never."""
        return max(self.interval_s * 4, POLL_TIMEOUT_S)

    def _run(self) -> None:
        names = tuple(self.gauges)
        while not self._stop.wait(self.interval_s):
            got = scrape(self.url, timeout_s=self.poll_timeout_s, only=frozenset(names))
            if got.snapshot is None:
                self.failures += 1
                continue
            self.polls += 1
            values = {name: v for name in names if (v := got.snapshot.total(name)) is not None}
            for name, value in values.items():
                self.readings.setdefault(name, []).append(value)
            self.series.append((got.snapshot.taken_s, values))

    @property
    def peaks(self) -> dict[str, float]:
        return {name: max(values) for name, values in self.readings.items()}

    def start(self) -> GaugePoller:
        self._thread = threading.Thread(target=self._run, name="infkit-gauge-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll_timeout_s + 1)
