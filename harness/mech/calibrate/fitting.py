"""Fitting the step-cost model to measured per-request TTFT and TPOT by linearising the simulator.

For a fixed schedule (which requests share which steps), every simulated time
is linear in the cost coefficients w: a busy period starts at an arrival (a
constant) and each step adds ``x_s . w``, where ``x_s`` are the step's features
(1, prompt tokens, attention pairs/1000, decoding sequences, context/1000).
So, with the cumulative feature sums ``X``:

    TTFT_i = X[first-token step] - X[busy-period start] . w + (period start - arrival_i) + overhead
    TPOT_i = (X[finish step] - X[first-token step]) . w / (output_i - 1)

The fit alternates: simulate the measured arrivals with the current w, build
these equations from the step log, solve a relative-error non-negative least
squares, repeat until w settles. A constant per-request TTFT overhead (HTTP,
tokenisation) is one more unknown carried only by the TTFT rows. Rows whose
residual is far outside the rest (a stalled machine, a stray process) are
dropped once, by a median-absolute-deviation rule, and the count reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import InvalidInput
from harness.mech.engine.blocks import PlainPool
from harness.mech.engine.costmodel import FEATURES, StepCostModel
from harness.mech.engine.engine import Engine
from harness.mech.engine.types import EngineConfig, Seq
from harness.mech.engine.workload import SimWorkload

COLUMNS = (*FEATURES, "ttft_overhead_ms")


@dataclass(frozen=True)
class Observation:
    """What was measured for one request (ms), and when it was actually sent (s from run start)."""

    index: int
    ttft_ms: float
    tpot_ms: float | None
    output_tokens: int
    sent_s: float | None = None


def nnls_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares on relative error with non-negative coefficients (active set: drop the most negative)."""
    if np.any(y <= 0):
        raise InvalidInput("measured times must be positive")
    w = 1 / y
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        if np.all(sol >= 0):
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return coef


def equations(workload: SimWorkload, measured: dict[int, Observation], model: StepCostModel,
              engine: EngineConfig) -> tuple[np.ndarray, np.ndarray]:
    """Rows over COLUMNS and targets (ms) for every measured request, under ``model``'s schedule."""
    seqs = [Seq(r, measured[r.index].sent_s if r.index in measured and measured[r.index].sent_s is not None
                else float(r.arrival_s or 0.0)) for r in workload.requests]
    sim = Engine(engine, model, PlainPool(engine.num_blocks, engine.block_size), seqs, log_steps=True)
    result = sim.run()
    log = sim.step_log or []
    feats = np.zeros((len(log) + 1, len(FEATURES)))
    feats[1:] = np.cumsum(np.array([f for _, _, f in log], dtype=float), axis=0) if log else 0
    end_index = {end: i for i, (_, end, _) in enumerate(log)}
    period_start, period_time = [0] * len(log), [0.0] * len(log)
    for i, (start, _, _) in enumerate(log):
        contiguous = i > 0 and start == log[i - 1][1]
        period_start[i] = period_start[i - 1] if contiguous else i
        period_time[i] = period_time[i - 1] if contiguous else start
    rows, ys = [], []
    for rec in result.records:
        obs = measured.get(rec.index)
        if obs is None or rec.first_token_s is None:
            continue
        s_first = end_index[rec.first_token_s]
        p = period_start[s_first]
        const_ms = 1000 * (period_time[s_first] - rec.arrival_s)
        rows.append([*(feats[s_first + 1] - feats[p]), 1.0])
        ys.append(obs.ttft_ms - const_ms)
        if obs.tpot_ms is not None and rec.output_tokens > 1:
            s_fin = end_index[rec.finish_s]
            rows.append([*((feats[s_fin + 1] - feats[s_first + 1]) / (rec.output_tokens - 1)), 0.0])
            ys.append(obs.tpot_ms)
    if len(rows) < len(COLUMNS):
        raise InvalidInput(f"only {len(rows)} usable measurements; the fit needs at least {len(COLUMNS)}")
    return np.asarray(rows), np.asarray(ys)


def positive_equations(workload: SimWorkload, measured: dict[int, Observation], model: StepCostModel,
                       engine: EngineConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """``equations`` without the rows whose target is at or below zero (a simulated wait longer than the
    measured TTFT, or TPOT 0 when a loaded server flushed every token in one chunk): they have no relative
    residual. Returns the rows, the targets and how many were left out."""
    x, y = equations(workload, measured, model, engine)
    keep = y > 0
    return x[keep], y[keep], int((~keep).sum())


def fit_to_measurements(workload: SimWorkload, measured: dict[int, Observation], engine: EngineConfig,
                        start: StepCostModel | None = None, iterations: int = 8,
                        ) -> tuple[StepCostModel, float, dict[str, float]]:
    """Fit (model, TTFT overhead ms, stats) so the simulator reproduces the measured TTFT and TPOT.

    Each round solves the equations of the current model's schedule; the fit kept is the round whose coefficients
    best reproduce the measurements *under their own schedule* (median relative residual, read from the next
    round's equations), not the last round: a schedule that flips with the coefficients can make the rounds cycle
    between a good and a bad solution (seen on a live calibration: 0.06 and 0.42 alternating), and a stop at the
    round limit must not keep the bad one."""
    model = start or StepCostModel()
    coef: np.ndarray | None = None
    best: tuple[float, np.ndarray, StepCostModel, int, int, np.ndarray, int] | None = None
    rounds, settled, dropped = 0, False, 0
    while True:
        x, y, nonpositive = positive_equations(workload, measured, model, engine)  # ``model``'s own schedule
        if coef is not None:
            rel = (x @ coef - y) / y
            if best is None or np.median(np.abs(rel)) < best[0]:
                best = (float(np.median(np.abs(rel))), coef, model, dropped + nonpositive, rounds, rel, nonpositive)
        if settled or rounds == iterations:
            break
        rounds += 1
        coef_new, dropped = robust_solve(x, y)
        settled = coef is not None and np.allclose(coef_new, coef, rtol=1e-6, atol=1e-9)
        coef, model = coef_new, _model(coef_new)
    assert best is not None  # iterations >= 1
    _, coef, model, dropped, kept, rel, nonpositive = best
    stats = {"equations": len(rel) + nonpositive, "iterations": rounds, "kept_round": kept,
             "settled": bool(settled), "dropped_outliers": dropped, "nonpositive_targets": nonpositive,
             "median_abs_relative_residual": float(np.median(np.abs(rel))),
             "rms_relative_residual": float(np.sqrt(np.mean(rel**2)))}
    return model, float(coef[-1]), stats


def robust_solve(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """``nnls_relative``, solved again without the rows whose residual is far outside the rest (a median-absolute-
    deviation rule) when enough remain; the coefficients and how many rows were dropped."""
    coef = nnls_relative(x, y)
    rel = (x @ coef - y) / y
    mad = float(np.median(np.abs(rel - np.median(rel))))
    inliers = np.abs(rel - np.median(rel)) <= max(0.25, 5 * 1.4826 * mad)
    if not inliers.all() and inliers.sum() >= len(COLUMNS):
        coef = nnls_relative(x[inliers], y[inliers])
    return coef, int((~inliers).sum())


def _model(coef: np.ndarray) -> StepCostModel:
    values = dict(zip(COLUMNS, coef.tolist(), strict=True))
    values.pop("ttft_overhead_ms")
    if values["base_ms"] + values["prefill_ms_per_token"] + values["decode_ms_per_seq"] <= 0:
        raise InvalidInput("the measurements imply zero-cost steps; the profiling data is degenerate")
    return StepCostModel(**values)
