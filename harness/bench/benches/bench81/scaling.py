"""Scaling efficiency of parallel layouts against a single-device instance of the same model.

A layout on ``d`` devices serves the same request list at the same offered load as its
baseline (one instance on one device). Per repeat, its throughput is the arm run's output
tokens per second. Then:

- speedup      S = mean throughput / mean baseline throughput
- per device   T_d = mean throughput / d
- efficiency   E = S / d  (1.0: every added device adds a whole baseline; < 1: something is shared)

Intervals: the layouts and their baseline ran on different server starts (not interleaved), so
the interval is an unpaired percentile bootstrap — each side's repeats resampled on their own,
the ratio of the resampled means, seeded. With three repeats it is coarse, and says so by its width.
Latencies (TTFT, TPOT, E2E) pool each layout's requests at that equal offered load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.bench.metrics import E2E_P50, OUTPUT_TOKENS_PER_S, TPOT_P50, TTFT_P50, TTFT_P99
from harness.bench.records import ArmRun

LATENCIES = (TTFT_P50, TTFT_P99, TPOT_P50, E2E_P50)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Ratio:
    """A ratio of means with its bootstrap interval."""

    value: float
    ci_low: float
    ci_high: float

    def text(self, fmt: str = ".2f") -> str:
        return f"{self.value:{fmt}} [{self.ci_low:{fmt}}, {self.ci_high:{fmt}}]"


def ratio_of_means(num: Sequence[float], den: Sequence[float], *, scale: float = 1.0, resamples: int = 10_000,
                   seed: int = 0, confidence: float = CONFIDENCE) -> Ratio | None:
    """``scale * mean(num) / mean(den)`` with an unpaired percentile bootstrap interval; None without data."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.size == 0 or b.size == 0 or b.mean() <= 0:
        return None
    value = scale * float(a.mean() / b.mean())
    rng = np.random.default_rng(seed)
    boot_a = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    boot_b = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    boot = scale * boot_a / boot_b
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return Ratio(value, min(float(lo), value), max(float(hi), value))


@dataclass(frozen=True)
class LayoutScaling:
    """One layout against its baseline."""

    layout: str
    devices: int
    baseline: str
    repeats: int
    throughput_tok_s: float | None  # mean of the repeats
    throughput_range: tuple[float, float] | None
    per_device_tok_s: float | None
    speedup: Ratio | None
    efficiency: Ratio | None
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    empty_repeats: int = 0  # repeats in which no request completed (e.g. all timed out): not in the mean
    valid: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured(runs: Sequence[ArmRun], label: str) -> list[ArmRun]:
    """The repeats of ``label`` that ran and completed at least one request (a repeat whose every
    request timed out measured no throughput: it is counted in ``empty_repeats``, not averaged as 0)."""
    return [r for r in runs if r.label == label and not r.failure and r.completed > 0]


def throughputs(runs: Sequence[ArmRun], label: str) -> list[float]:
    """Output tokens per second of every measured repeat of ``label``."""
    return [v for v in (OUTPUT_TOKENS_PER_S.of_run(r) for r in measured(runs, label)) if v is not None]


def layout_scaling(runs: Sequence[ArmRun], label: str, devices: int, baseline: str, *, resamples: int = 10_000,
                   seed: int = 0) -> LayoutScaling:
    mine, base = throughputs(runs, label), throughputs(runs, baseline)
    done = measured(runs, label)
    empty = sum(1 for r in runs if r.label == label and not r.failure and r.records and not r.completed)
    speedup = ratio_of_means(mine, base, resamples=resamples, seed=seed) if label != baseline else None
    efficiency = (ratio_of_means(mine, base, scale=1.0 / devices, resamples=resamples, seed=seed)
                  if label != baseline else None)
    mean = float(np.mean(mine)) if mine else None
    return LayoutScaling(
        layout=label, devices=devices, baseline=baseline, repeats=len(done), throughput_tok_s=mean,
        throughput_range=(min(mine), max(mine)) if mine else None,
        per_device_tok_s=mean / devices if mean is not None else None, speedup=speedup, efficiency=efficiency,
        latency_ms={m.name: m.value(done) for m in LATENCIES}, empty_repeats=empty,
        valid=bool(done) and not empty and all(r.valid for r in done))


def scaling_table(rows: Sequence[LayoutScaling]) -> list[list[str]]:
    """Rows for people: layout, devices, throughput, per device, speedup and efficiency with intervals, latencies."""
    def num(value: float | None, fmt: str = ".1f") -> str:
        return "-" if value is None else format(value, fmt)

    out = []
    for row in rows:
        spread = (f" [{row.throughput_range[0]:.1f}, {row.throughput_range[1]:.1f}]"
                  if row.throughput_range else "")
        empty = f" ({row.empty_repeats} empty)" if row.empty_repeats else ""
        out.append([row.layout, f"{row.devices}", f"{num(row.throughput_tok_s)}{spread}{empty}", num(row.per_device_tok_s),
                    row.speedup.text() if row.speedup else "1 (baseline)" if row.layout == row.baseline else "-",
                    row.efficiency.text() if row.efficiency else "1 (baseline)" if row.layout == row.baseline else "-",
                    *(num(row.latency_ms.get(m.name), m.fmt) for m in LATENCIES),
                    "yes" if row.valid else "no"])
    return out


SCALING_HEADERS = ["layout", "devices", "out tok/s (mean [min, max])", "tok/s per device", "speedup [95% CI]",
                   "efficiency [95% CI]", *(m.title for m in LATENCIES), "valid"]
