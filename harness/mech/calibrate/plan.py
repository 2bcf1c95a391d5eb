"""Calibration data: the profiling plan, measured per-request records, prediction and comparison.

The profiling plan is a sequence of bursts separated by idle gaps: prompts of
32 to 1536 tokens one at a time (prefill cost, including its quadratic
attention term), then 2, 4 and 8 concurrent requests at two prompt lengths
(decode cost against batch size and context). ``harness.mech.calibrate.fitting`` fits
the step-cost model to what a server measured on it; ``predict`` and
``compare`` then check the model on a held-out workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client.records import RequestRecord
from harness.contract.jsonio import iter_json_lines
from harness.contract.schemas import DocumentError
from harness.errors import InvalidInput
from harness.mech.calibrate.fitting import Observation
from harness.mech.engine.costmodel import FEATURES, StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SimRequest, SimWorkload
from harness.serving.metrics import output_tokens, per_request


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


def _from_request_record(row: dict[str, Any]) -> Observation | None:
    """An Observation from one ``harness.client`` record (``requests.jsonl`` of ``infkit run``)."""
    rec = RequestRecord.from_dict(row)
    if not rec.completed or rec.sent_s is None or rec.end_s is None or rec.first_token_s is None:
        return None
    latency = per_request(rec)
    return Observation(rec.index, latency["ttft_ms"], latency["tpot_ms"], output_tokens(rec), rec.sent_s)


def read_measured(path: str | Path) -> dict[int, Observation]:
    """Per-request records: the serving client's ``requests.jsonl`` (completed requests only), or flat rows
    of index, ttft_ms, tpot_ms or e2e_ms + output_tokens, and optionally sent_s (actual send time, seconds
    from run start; the scheduled offset is used without it)."""
    out: dict[int, Observation] = {}
    try:
        rows = [row for _, row in iter_json_lines(path)]
    except DocumentError as exc:
        raise InvalidInput(f"cannot read measured records: {exc}") from None
    for row in rows:
        if "status" in row and "first_token_s" in row:
            obs = _from_request_record(row)
            if obs is not None:
                out[obs.index] = obs
            continue
        if str(row.get("schema", "")).startswith("infkit/workload") or row.get("ttft_ms") is None:
            continue
        n_out = int(row.get("output_tokens") or 0)
        tpot = row.get("tpot_ms")
        if tpot is None and row.get("e2e_ms") is not None and n_out > 1:
            tpot = (float(row["e2e_ms"]) - float(row["ttft_ms"])) / (n_out - 1)
        sent = row.get("sent_s")
        out[int(row["index"])] = Observation(int(row["index"]), float(row["ttft_ms"]),
                                             None if tpot is None else float(tpot), n_out,
                                             None if sent is None else float(sent))
    if not out:
        raise InvalidInput(f"{path}: no completed request records with a TTFT")
    return out


def predict(workload: SimWorkload, model: StepCostModel, overhead_ms: float,
            engine: EngineConfig) -> dict[int, Observation]:
    """Per-request TTFT/TPOT the simulator predicts for ``workload``."""
    run, _ = run_continuous(workload, engine, model)
    out = {}
    for r in run.records:
        if r.ttft_s is None:
            continue
        tpot = None if r.tpot_s is None else 1000 * r.tpot_s
        out[r.index] = Observation(r.index, 1000 * r.ttft_s + overhead_ms, tpot, r.output_tokens)
    return out


def compare(predicted: dict[int, Observation], measured: dict[int, Observation]) -> dict[str, dict[str, float]]:
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
                           noise: float, seed: int) -> dict[int, Observation]:
    """'Measured' records from a known cost model with multiplicative log-normal noise (for self-checks)."""
    rng = np.random.default_rng(seed)
    exact = predict(workload, truth, overhead_ms, engine)
    out = {}
    for i in sorted(exact):
        m = exact[i]
        ttft = m.ttft_ms * float(np.exp(rng.normal(0, noise)))
        tpot = None if m.tpot_ms is None else m.tpot_ms * float(np.exp(rng.normal(0, noise)))
        out[i] = Observation(i, ttft, tpot, m.output_tokens)
    return out


def model_error(fitted: StepCostModel, truth: StepCostModel) -> dict[str, Any]:
    return {k: {"truth": getattr(truth, k), "fitted": round(getattr(fitted, k), 9)} for k in FEATURES}
