"""bench-70's held-out design: the run the step costs are fitted on is never a run that judges the prediction.

Rule (stated once, here). When the calibration arm is fitted in this bench run, it belongs to one repeat (the
first: it opens the first phase); every arm run of that repeat is left out, and the predictions are judged on the
arms' other repeats only. With ``--repeats 1`` nothing is held out and nothing is judged. A step-cost model cited
from another run's manifest (``--cost-model-manifest``) was fitted elsewhere, so every repeat judges it. Test runs
on the calibration's own server start (same phase, same server) are counted and named: under ``--order
alternate`` there are none; under the default ``sequential`` the arms of the first server share its start.

Uncertainty. An arm's measured figure is resampled hierarchically: its test repeats with replacement, then the
requests of each drawn repeat (a per-run figure such as mean running: the drawn repeats' median). Those
replicates give the measured figure's 95 % interval, which each prediction is judged against (inside or not).
Across arms, the mean signed error (bias, predicted / measured - 1) and the MAPE are resampled with the arm as
the outer unit (arms drawn with replacement, each with one replicate of its measurement): a percentile interval
that holds the arms' spread and the measurements' sampling error. The calibration's own fit error is not
resampled (one calibration run) and the simulator is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.bench.metrics import Metric
from harness.bench.records import ArmRun
from harness.bench.spec import Plan
from harness.errors import InvalidInput

RunKey = tuple[str, int]  # (arm label, repeat)
CONFIDENCE = 0.95
METHOD = ("hierarchical percentile bootstrap: per arm its test repeats, then each repeat's requests, resampled; "
          "across arms the arm is the outer unit (drawn with replacement)")


@dataclass(frozen=True)
class Split:
    """Which run calibrated the simulator and which runs judge its predictions."""

    calibration: RunKey | None  # None: the step costs were cited from another run
    test: tuple[RunKey, ...]
    left_out: tuple[RunKey, ...] = ()  # runs in the calibration's repeat: not judged
    same_start: tuple[RunKey, ...] = ()  # test runs on the calibration's server start
    source: str = ""

    def __post_init__(self) -> None:
        if self.calibration is None:
            return
        label, repeat = self.calibration
        shared = [k for k in self.test if k == self.calibration or k[1] == repeat]
        if shared:
            raise InvalidInput(f"the calibration run {label} r{repeat} is in the repeat of the runs that test it "
                               f"({', '.join(f'{a} r{r}' for a, r in shared)}): judge on the other repeats")

    @property
    def test_repeats(self) -> tuple[int, ...]:
        return tuple(sorted({r for _, r in self.test}))

    def runs(self, runs: Sequence[ArmRun], label: str) -> list[ArmRun]:
        """``label``'s completed runs that test the prediction."""
        keys = set(self.test)
        return [r for r in runs if r.label == label and (r.label, r.repeat) in keys]

    def to_dict(self) -> dict[str, Any]:
        def keys(items: Sequence[RunKey]) -> list[dict[str, Any]]:
            return [{"arm": a, "repeat": r} for a, r in items]

        return {"calibration": keys([self.calibration])[0] if self.calibration else None, "test": keys(self.test),
                "left_out": keys(self.left_out), "same_start": keys(self.same_start),
                "test_repeats": list(self.test_repeats), "source": self.source, "rule": rule(self)}


def rule(split: Split, short: bool = False) -> str:
    """The split in words (``short``: for the one-line headline)."""
    if split.calibration is None:
        return f"step costs {split.source}; every repeat judges them"
    label, repeat = split.calibration
    tests = ", ".join(f"r{r}" for r in split.test_repeats) or "nothing (one repeat)"
    shared = f"{len(split.same_start)}/{len(split.test)} test runs on the calibration's server start"
    if short:
        return f"fitted on {label} r{repeat}, judged on {tests}; {shared}"
    return (f"step costs fitted on {label} r{repeat} ({split.source}); repeat {repeat}'s arm runs left out; "
            f"judged on {tests}; {shared}")


def split_runs(plan: Plan, runs: Sequence[ArmRun], labels: Sequence[str], calibration: ArmRun | None,
               source: str) -> Split:
    """The held-out split of the completed runs of ``labels`` (the rule in the module docstring)."""
    done = [(r.label, r.repeat) for r in runs if r.label in labels and not r.failure and r.records]
    if calibration is None:
        return Split(None, tuple(done), source=source)
    key = (calibration.label, calibration.repeat)
    test = tuple(k for k in done if k[1] != calibration.repeat)
    shared = on_calibration_start(plan, key)
    return Split(key, test, tuple(k for k in done if k[1] == calibration.repeat),
                 tuple(k for k in test if k in shared), source)


def on_calibration_start(plan: Plan, calibration: RunKey) -> set[RunKey]:
    """The steps run on the calibration's server start: its phase, its server."""
    for phase in plan.schedule.phases:
        steps = [] if callable(phase.steps) else list(phase.steps)
        server = next((a.server for r, a in steps if (a.label, r) == calibration), None)
        if server is not None:
            return {(a.label, r) for r, a in steps if a.server == server}
    return set()


def _run_values(metric: Metric, run: ArmRun) -> np.ndarray:
    """One value per request of the run (NaN where the request has none), aligned with its records."""
    assert metric.samples is not None  # per-request metrics only
    cells = [metric.samples([rec]) for rec in run.records]
    if any(len(c) > 1 for c in cells):
        raise ValueError(f"{metric.name} has several values per request: resample its requests another way")
    return np.asarray([c[0] if c else np.nan for c in cells], dtype=float)


def replicates(metrics: Sequence[Metric], runs: Sequence[ArmRun], *, resamples: int,
               rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each metric's bootstrap replicates over ``runs``: repeats drawn, then each drawn repeat's requests."""
    per_request = {m.name: [_run_values(m, run) for run in runs] for m in metrics if m.per_request and m.statistic}
    per_run = {m.name: np.asarray([np.nan if (v := m.of_run(run)) is None else v for run in runs], dtype=float)
               for m in metrics if not m.per_request and m.of_run}
    stat = {m.name: m.statistic for m in metrics if m.statistic is not None}
    out = {name: np.full(resamples, np.nan) for name in (*per_request, *per_run)}
    if not runs:
        return out
    for b in range(resamples):
        picks = rng.integers(0, len(runs), len(runs))
        rows = [rng.integers(0, len(runs[p].records), len(runs[p].records)) for p in picks]
        for name, values in per_request.items():
            pooled = np.concatenate([values[p][i] for p, i in zip(picks, rows, strict=True)])
            pooled = pooled[~np.isnan(pooled)]
            if pooled.size:
                out[name][b] = stat[name](pooled)
        for name, figures in per_run.items():
            drawn = figures[picks]
            if not np.all(np.isnan(drawn)):
                out[name][b] = float(np.nanmedian(drawn))
    return out


def interval(reps: np.ndarray, confidence: float = CONFIDENCE, *, degenerate: bool = False
             ) -> tuple[float, float] | None:
    """The percentile interval of replicates; None when they do not vary (one repeat of a per-run figure), unless
    ``degenerate`` allows a point interval."""
    ok = reps[~np.isnan(reps)]
    if ok.size < 2 or (ok.min() == ok.max() and not degenerate):
        return None
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(ok, [alpha, 1 - alpha])
    return float(lo), float(hi)


@dataclass(frozen=True)
class ArmErrors:
    """One arm's predictions and the replicates of its measured figures (keys: metric names)."""

    arm: str
    predicted: Mapping[str, float]
    measured: Mapping[str, float]
    replicates: Mapping[str, np.ndarray] = field(repr=False)


def _error(predicted: float, measured: float) -> float:
    """predicted / measured - 1; NaN where the replicate has no (or a zero) measurement."""
    return predicted / measured - 1 if measured and np.isfinite(measured) else float("nan")


def across_arms(arms: Sequence[ArmErrors], names: Sequence[str], *, resamples: int, seed: int,
                confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean signed error and MAPE over the (arm, figure) pairs of ``names``, with intervals from resampling arms."""
    members = [(a, [n for n in names if n in a.predicted and a.measured.get(n)]) for a in arms]
    members = [(a, used) for a, used in members if used]
    if not members:
        return {"n_arms": 0, "n": 0, "mean_signed_error": None, "mape": None}
    point = np.asarray([a.predicted[n] / a.measured[n] - 1 for a, used in members for n in used])
    rng = np.random.default_rng(seed)
    bias, mape = np.full(resamples, np.nan), np.full(resamples, np.nan)
    for b in range(resamples):
        errs = []
        for i in rng.integers(0, len(members), len(members)):
            arm, used = members[i]
            column = int(rng.integers(0, min(len(arm.replicates[n]) for n in used)))
            errs += [_error(arm.predicted[n], arm.replicates[n][column]) for n in used]
        e = np.asarray(errs, dtype=float)
        e = e[~np.isnan(e)]
        if e.size:
            bias[b], mape[b] = e.mean(), np.abs(e).mean()
    bounds = {k: interval(v, confidence, degenerate=True) for k, v in (("bias", bias), ("mape", mape))}
    return {"n_arms": len(members), "n": int(point.size), "arms": [a.arm for a, _ in members],
            "mean_signed_error": float(point.mean()), "mean_signed_error_interval": bounds["bias"],
            "mape": float(np.abs(point).mean()), "mape_interval": bounds["mape"],
            "unit": "fraction (predicted / measured - 1)", "confidence": confidence, "resamples": resamples,
            "seed": seed, "method": METHOD}


def pct_interval(value: float | None, bounds: tuple[float, float] | None, signed: bool) -> str:
    """``+3.0 % [-2.1, +8.0]`` (a fraction shown in percent)."""
    if value is None:
        return "-"
    sign = "+" if signed else ""
    text = f"{value * 100:{sign}.1f} %"
    return text + (f" [{bounds[0] * 100:{sign}.1f}, {bounds[1] * 100:{sign}.1f}]" if bounds else " [no interval]")
