"""Scaling efficiency of parallel layouts against a single-device instance of the same model.

A layout on ``d`` devices serves the same request list at the same offered load as its baseline (one instance on
one device). Every layout is started ``starts`` times, alternating with the baseline (round s: the baseline's
s-th start, then each layout's s-th start), so drift of the host between rounds hits both sides. The unit of
replication is the server start: a start's throughput is the mean output tok/s of its runs (each over its
steady-state window, ramp and drain left out, else its whole run; the drain fraction is shown beside it). Then:

- speedup      S = mean throughput / mean baseline throughput
- per device   T_d = mean throughput / d
- efficiency   E = S / (cores of the layout's stack / cores of the baseline's stack)
- throughput   the mean over starts, with a 95 % Student t interval over them (the start is the unit)

Every core the serving stack and the client use is counted: on the CPU default a device is one core and the API
server, scheduler and client need one more (``STACK_CORES``), so the baseline uses 2 and a d-device layout d + 1.
A layout whose stack needs more cores than the host has is "not measurable on N cores": it runs, its throughput
is shown, and it has no efficiency. On GPUs a device is a GPU and E = S / d.

Intervals: a round pairs a baseline start with the layout's start of the same round; the speedup is the geometric
mean of the per-round ratios with a 95 % Student t interval on their logs (n - 1 degrees of freedom). A percentile
bootstrap over 3 rounds is their range and covered 70-76 % (``benchmarks/coverage.py``). When the rounds do not
line up (a start failed, or was not replicated), the starts are resampled on each side (seeded percentile
bootstrap of the ratio of means).
Latencies (TTFT, TPOT, E2E) pool each layout's requests at that load (the closed loop at saturation by default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.bench.metrics import (
    E2E_P50,
    ENERGY_COLUMNS,
    OUTPUT_TOKENS_PER_S,
    TPOT_P50,
    TTFT_P50,
    TTFT_P99,
    basis_summary,
)
from harness.bench.records import ArmRun
from harness.bench.stats import t_interval

LATENCIES = (TTFT_P50, TTFT_P99, TPOT_P50, E2E_P50)
CONFIDENCE = 0.95
STACK_CORES = 1  # API server, scheduler and client beside the engine's devices (CPU default)


@dataclass(frozen=True)
class Ratio:
    """A ratio (of means, or the geometric mean of per-round ratios) with its interval."""

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


def paired_log_ratio(num: Sequence[float], den: Sequence[float], *, scale: float = 1.0,
                     confidence: float = CONFIDENCE) -> Ratio | None:
    """``scale`` x the geometric mean of the per-round ratios ``num[i] / den[i]``, with a Student t interval on
    their logs; None without two rounds that line up."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.size < 2 or a.size != b.size or (a <= 0).any() or (b <= 0).any():
        return None
    lo, hi, _ = t_interval(np.log(a / b), confidence)
    value = scale * float(np.exp(np.log(a / b).mean()))
    return Ratio(value, scale * math.exp(lo), scale * math.exp(hi))


def core_scale(devices: int, cpu: bool, host_cores: int) -> tuple[float | None, str]:
    """The efficiency denominator (the layout's cores over the baseline's) and what it counts; None where the
    layout's stack needs more cores than the host has."""
    if not cpu:
        return float(devices), f"{devices} GPU(s)"
    mine, base = devices + STACK_CORES, 1 + STACK_CORES
    if mine > host_cores:
        return None, (f"not measurable on {host_cores} cores: {devices} engine core(s) + {STACK_CORES} for the API "
                      f"server, scheduler and client need {mine}")
    return mine / base, f"{mine} cores ({devices} engine + {STACK_CORES} stack) over the baseline's {base}"


def by_start(runs: Sequence[ArmRun], label: str, per_start: int) -> dict[int, float]:
    """Mean output tok/s of each server start of ``label`` (start s holds repeats (s-1)*per_start+1 ...)."""
    out: dict[int, list[float]] = {}
    for run in measured(runs, label):
        value = OUTPUT_TOKENS_PER_S.run_value(run)
        if value is not None:
            out.setdefault((run.repeat - 1) // per_start + 1, []).append(value)
    return {s: float(np.mean(v)) for s, v in sorted(out.items())}


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
    energy: dict[str, float | None] = field(default_factory=dict)  # J/out tok, average W, USD/M out tok (medians)
    empty_repeats: int = 0  # repeats in which no request completed (e.g. all timed out): not in the mean
    valid: bool = True
    invalid_repeats: int = 0  # repeats left out as invalid (the client could not keep its schedule, ...)
    starts: int = 0  # server starts measured (the unit of replication)
    # 95 % Student t interval of the mean throughput over the starts (the unit); None with fewer than 2
    throughput_ci: tuple[float, float] | None = None
    cores: str = ""  # what the efficiency denominator counts, or why there is none
    # which window the throughputs cover (steady state, else whole run) and the runs' drain fraction
    throughput_basis: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured(runs: Sequence[ArmRun], label: str) -> list[ArmRun]:
    """The valid repeats of ``label`` that ran and completed at least one request (a repeat whose every
    request timed out measured no throughput: it is counted in ``empty_repeats``, not averaged as 0; an
    invalid one is left out of every figure, as in every bench, and counted in ``invalid_repeats``)."""
    return [r for r in runs if r.label == label and not r.failure and r.completed > 0 and r.valid]


def throughputs(runs: Sequence[ArmRun], label: str) -> list[float]:
    """Output tokens per second of every measured repeat of ``label``."""
    return [v for v in (OUTPUT_TOKENS_PER_S.run_value(r) for r in measured(runs, label)) if v is not None]


def layout_scaling(runs: Sequence[ArmRun], label: str, devices: int, baseline: str, *, resamples: int = 10_000,
                   seed: int = 0, per_start: int = 1, cpu: bool = False, host_cores: int = 1) -> LayoutScaling:
    mine_by, base_by = by_start(runs, label, per_start), by_start(runs, baseline, per_start)
    done = measured(runs, label)
    mine = [v for v in (OUTPUT_TOKENS_PER_S.run_value(r) for r in done) if v is not None]
    empty = sum(1 for r in runs if r.label == label and not r.failure and r.records and not r.completed)
    invalid = sum(1 for r in runs if r.label == label and not r.failure and r.completed > 0 and not r.valid)
    rounds = sorted(set(mine_by) & set(base_by))
    scale, cores = core_scale(devices, cpu, host_cores)
    speedup = efficiency = None
    if label != baseline:
        if len(rounds) > 1 and len(rounds) == len(mine_by) == len(base_by):  # one round has no spread
            num, den = [mine_by[s] for s in rounds], [base_by[s] for s in rounds]
            speedup = paired_log_ratio(num, den)
            efficiency = paired_log_ratio(num, den, scale=1.0 / scale) if scale else None
        elif len(mine_by) > 1:  # the rounds do not line up (a start failed, or was not replicated): starts
            # resampled on each side; one start has no spread of its own to resample, so it gets no ratio
            num, den = list(mine_by.values()), list(base_by.values())
            speedup = ratio_of_means(num, den, resamples=resamples, seed=seed)
            efficiency = ratio_of_means(num, den, scale=1.0 / scale, resamples=resamples, seed=seed) if scale else None
    mean = float(np.mean(list(mine_by.values()))) if mine_by else None
    # Student t over the start means on the log scale: a throughput's interval never reaches zero
    logs = np.log([v for v in mine_by.values() if v > 0])
    ci = None
    if logs.size > 1:
        low, high, _ = t_interval(logs, CONFIDENCE)
        ci = (math.exp(low), math.exp(high))
    return LayoutScaling(
        layout=label, devices=devices, baseline=baseline, repeats=len(done), throughput_tok_s=mean,
        throughput_range=(min(mine), max(mine)) if mine else None,
        per_device_tok_s=mean / devices if mean is not None else None, speedup=speedup, efficiency=efficiency,
        latency_ms={m.name: m.value(done) for m in LATENCIES}, empty_repeats=empty,
        energy={m.name: m.value(done) for m in ENERGY_COLUMNS},
        valid=bool(done) and not empty, starts=len(mine_by), cores=cores, throughput_ci=ci,
        invalid_repeats=invalid, throughput_basis=basis_summary(done))


def scaling_table(rows: Sequence[LayoutScaling]) -> list[list[str]]:
    """Rows for people: layout, devices, throughput, per device, speedup and efficiency with intervals, latencies."""
    def num(value: float | None, fmt: str = ".1f") -> str:
        return "-" if value is None else format(value, fmt)

    out = []
    for row in rows:
        spread = (f" [{row.throughput_range[0]:.1f}, {row.throughput_range[1]:.1f}]"
                  if row.throughput_range else "")
        empty = f" ({row.empty_repeats} empty)" if row.empty_repeats else ""
        empty += f" ({row.invalid_repeats} invalid, left out)" if row.invalid_repeats else ""
        drain = row.throughput_basis.get("drain_fraction")
        empty += f" drain {drain:.0%}" if drain is not None else ""
        out.append(
            [
                row.layout,
                f"{row.devices}",
                f"{num(row.throughput_tok_s)}{spread}{empty}",
                num(row.per_device_tok_s),
                row.speedup.text() if row.speedup else "1 (baseline)" if row.layout == row.baseline else "-",
                row.efficiency.text()
                if row.efficiency
                else "1 (baseline)"
                if row.layout == row.baseline
                else ("n/m" if row.cores.startswith("not measurable") else "-"),
                f"{row.starts}",
                *(num(row.latency_ms.get(m.name), m.fmt) for m in LATENCIES),
                *(num(row.energy.get(m.name), m.fmt) for m in ENERGY_COLUMNS),
                "yes" if row.valid else "no",
            ]
        )
    return out


SCALING_HEADERS = [
    "layout",
    "devices",
    "out tok/s (mean [min, max])",
    "tok/s per device",
    "speedup [95% CI]",
    "efficiency [95% CI]",
    "starts",
    *(m.title for m in LATENCIES),
    *(m.title for m in ENERGY_COLUMNS),
    "valid",
]
