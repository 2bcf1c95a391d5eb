"""Calibrating the step-cost model from per-request measurements, and checking it on a held-out workload.

The profiling plan is a sequence of bursts separated by idle gaps; every
request of a burst has the same prompt and output length and is sent at the
same moment, so each burst's steps are known: one prefill step over
``B x L`` tokens (``B x L <= max_num_batched_tokens``), then decode steps with
``B`` sequences whose context grows from ``L + 1`` to ``L + out``. Each burst
gives two equations in the cost model's coefficients:

    median TTFT = overhead + step(P = B*L, A = B*L*L/2, 0, 0)
    median TPOT = step(0, 0, B, C = B*(L + out/2))

plus a per-request TTFT overhead (HTTP, tokenisation, detokenisation) that
only the TTFT equations carry. Rows are weighted by 1/measurement, so the fit
minimises relative error; negative coefficients are dropped and the rest refit
(a small active-set non-negative least squares).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.errors import InvalidInput
from harness.mech.costmodel import FEATURES, StepCostModel
from harness.mech.enginetypes import EngineConfig
from harness.mech.simulate import run_continuous
from harness.mech.workload import SimRequest, SimWorkload

COLUMNS = (*FEATURES, "ttft_overhead_ms")


@dataclass(frozen=True)
class Burst:
    batch: int
    input_tokens: int
    output_tokens: int


PREFILL_SWEEP = tuple(Burst(1, n, 8) for n in (32, 128, 256, 512, 768, 1024, 1536))
DECODE_SWEEP = tuple(Burst(b, n, 48) for b in (2, 4, 8) for n in (64, 448))


def profiling_plan(repeats: int = 2, gap_s: float = 6.0) -> SimWorkload:
    """The bursts of the profiling run as a workload: ``group`` numbers the burst."""
    reqs, t, index, group = [], 0.0, 0, 0
    for _ in range(repeats):
        for burst in PREFILL_SWEEP + DECODE_SWEEP:
            for _ in range(burst.batch):
                reqs.append(SimRequest(index, round(t, 6), burst.input_tokens, burst.output_tokens, group, 0))
                index += 1
            t += gap_s
            group += 1
    return SimWorkload(tuple(reqs), "sha256:" + "0" * 64, "trace", {"process": "trace"},
                       {"plan_repeats": repeats})


@dataclass(frozen=True)
class Measured:
    """One request's measured outcome (ms)."""

    index: int
    ttft_ms: float
    tpot_ms: float | None
    output_tokens: int


def read_measured(path: str | Path) -> dict[int, Measured]:
    """Per-request records (``requests.jsonl``): index, ttft_ms, and tpot_ms or e2e_ms + output_tokens."""
    out: dict[int, Measured] = {}
    try:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read measured records {path}: {exc}") from None
    for row in rows:
        if str(row.get("schema", "")).startswith("infkit/workload") or row.get("ttft_ms") is None:
            continue
        n_out = int(row.get("output_tokens") or 0)
        tpot = row.get("tpot_ms")
        if tpot is None and row.get("e2e_ms") is not None and n_out > 1:
            tpot = (float(row["e2e_ms"]) - float(row["ttft_ms"])) / (n_out - 1)
        out[int(row["index"])] = Measured(int(row["index"]), float(row["ttft_ms"]),
                                          None if tpot is None else float(tpot), n_out)
    if not out:
        raise InvalidInput(f"{path}: no records with ttft_ms")
    return out


def design(plan: SimWorkload, measured: dict[int, Measured]) -> tuple[np.ndarray, np.ndarray]:
    """Rows [base, P, A/1000, B, C/1000, ttft_overhead] and the measured ms, one TTFT and one TPOT row per burst."""
    bursts: dict[int, list[SimRequest]] = {}
    for req in plan.requests:
        bursts.setdefault(req.group or 0, []).append(req)
    rows, ys = [], []
    for reqs in bursts.values():
        b, n_in, n_out = len(reqs), reqs[0].input_tokens, reqs[0].output_tokens
        got = [measured[r.index] for r in reqs if r.index in measured]
        if not got:
            continue
        rows.append([1, b * n_in, b * n_in * n_in / 2 / 1000, 0, 0, 1])
        ys.append(float(np.median([m.ttft_ms for m in got])))
        tpots = [m.tpot_ms for m in got if m.tpot_ms is not None]
        if tpots:
            rows.append([1, 0, 0, b, b * (n_in + n_out / 2) / 1000, 0])
            ys.append(float(np.median(tpots)))
    if len(rows) < len(COLUMNS):
        raise InvalidInput(f"only {len(rows)} usable burst equations; the fit needs at least {len(COLUMNS)}")
    return np.asarray(rows, dtype=float), np.asarray(ys, dtype=float)


def fit(x: np.ndarray, y: np.ndarray) -> tuple[StepCostModel, float, dict[str, float]]:
    """Relative-error least squares with non-negative coefficients; returns model, TTFT overhead, fit stats."""
    if np.any(y <= 0):
        raise InvalidInput("measured times must be positive")
    w = 1 / y
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        if np.all(sol >= 0):
            coef[:] = 0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    values = dict(zip(COLUMNS, coef.tolist(), strict=True))
    overhead = values.pop("ttft_overhead_ms")
    rel = (x @ coef - y) / y
    stats = {"equations": int(len(y)), "rms_relative_residual": float(np.sqrt(np.mean(rel**2))),
             "max_relative_residual": float(np.max(np.abs(rel)))}
    return StepCostModel(**values), overhead, stats


def predict(workload: SimWorkload, model: StepCostModel, overhead_ms: float,
            engine: EngineConfig) -> dict[int, Measured]:
    """Per-request TTFT/TPOT the simulator predicts for ``workload``."""
    run, _ = run_continuous(workload, engine, model)
    out = {}
    for r in run.records:
        if r.ttft_s is None:
            continue
        tpot = None if r.tpot_s is None else 1000 * r.tpot_s
        out[r.index] = Measured(r.index, 1000 * r.ttft_s + overhead_ms, tpot, r.output_tokens)
    return out


def compare(predicted: dict[int, Measured], measured: dict[int, Measured]) -> dict[str, dict[str, float]]:
    """Predicted vs measured TTFT and TPOT, median and P95, with relative error (pred/meas - 1)."""
    common = sorted(set(predicted) & set(measured))
    if not common:
        raise InvalidInput("the held-out prediction and the measurement share no request index")
    out: dict[str, dict[str, float]] = {}
    for metric in ("ttft_ms", "tpot_ms"):
        pairs = [(getattr(predicted[i], metric), getattr(measured[i], metric)) for i in common]
        pairs = [(p, m) for p, m in pairs if p is not None and m is not None]
        if not pairs:
            continue
        p_arr, m_arr = np.array([p for p, _ in pairs]), np.array([m for _, m in pairs])
        for q, name in ((50, "p50"), (95, "p95")):
            pv, mv = float(np.percentile(p_arr, q)), float(np.percentile(m_arr, q))
            out[f"{metric}_{name}"] = {"predicted": round(pv, 6), "measured": round(mv, 6),
                                       "relative_error": round(pv / mv - 1, 6)}
    return out


def synthetic_measurements(workload: SimWorkload, truth: StepCostModel, overhead_ms: float, engine: EngineConfig,
                           noise: float, seed: int) -> dict[int, Measured]:
    """'Measured' records from a known cost model with multiplicative log-normal noise (for self-checks)."""
    rng = np.random.default_rng(seed)
    exact = predict(workload, truth, overhead_ms, engine)
    out = {}
    for i in sorted(exact):
        m = exact[i]
        ttft = m.ttft_ms * float(np.exp(rng.normal(0, noise)))
        tpot = None if m.tpot_ms is None else m.tpot_ms * float(np.exp(rng.normal(0, noise)))
        out[i] = Measured(i, ttft, tpot, m.output_tokens)
    return out


def model_error(fitted: StepCostModel, truth: StepCostModel) -> dict[str, Any]:
    return {k: {"truth": getattr(truth, k), "fitted": round(getattr(fitted, k), 9)} for k in FEATURES}


# -- the mechanism run ---------------------------------------------------------------------------

# A CPU-server-like ground truth for the self-check (SmolLM2-135M-scale step times).
SELF_CHECK_TRUTH = StepCostModel(base_ms=8.0, prefill_ms_per_token=0.4, prefill_ms_per_kilopair=0.05,
                                 decode_ms_per_seq=1.5, decode_ms_per_kilotoken=0.8)
SELF_CHECK_OVERHEAD_MS = 3.0
QUALITY_THRESHOLD = 0.10


@dataclass(frozen=True)
class CalibrateConfig:
    HELP: ClassVar[dict[str, str]] = {
        "endpoint": "live OpenAI-compatible server to profile (needs harness.serving)",
        "profile_records": "requests.jsonl measured on the profiling plan",
        "heldout_workload": "held-out workload file",
        "heldout_records": "requests.jsonl measured on the held-out workload",
        "repeats": "repetitions of the profiling plan",
        "gap_s": "idle gap between profiling bursts (s)",
        "noise": "self-check: log-normal noise on synthetic measurements",
        "heldout_requests": "self-check: held-out requests",
        "heldout_rate_rps": "self-check: held-out arrival rate",
        "max_num_batched_tokens": "the server's token budget per step",
        "max_num_seqs": "the server's running-sequence limit",
    }

    endpoint: str | None = None
    profile_records: str | None = None
    heldout_workload: str | None = None
    heldout_records: str | None = None
    repeats: int = 2
    gap_s: float = 6.0
    noise: float = 0.03
    seed: int = 0
    heldout_requests: int = 60
    heldout_rate_rps: float = 0.5
    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 32
    block_size: int = 16
    num_blocks: int = 8192

    def __post_init__(self) -> None:
        recorded = (self.profile_records, self.heldout_workload, self.heldout_records)
        if any(recorded) and not all(recorded):
            raise InvalidInput("recorded calibration needs --profile-records, --heldout-workload and "
                               "--heldout-records together")
        if self.repeats < 1 or self.gap_s <= 0 or self.noise < 0:
            raise InvalidInput("need repeats >= 1, gap_s > 0 and noise >= 0")
