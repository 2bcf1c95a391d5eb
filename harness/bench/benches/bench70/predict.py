"""The batching simulator's prediction of a served arm, and its error against the measurement.

A calibrated step-cost model (``harness.mech.costmodel``: fitted here from a calibration arm
that replayed the profiling plan on the same server, or a cited ``step_cost.json``) drives the
simulator (``harness.mech.engine``) over the arm's own workload file with the arm's own
engine settings as the server reported them (max_num_seqs, max_num_batched_tokens, policy,
block size and KV blocks). Three client modes, as served:

- open: requests arrive at their ``offset_s`` (the timed schedule);
- closed: ``concurrency`` slots, the next request arrives when one finishes;
- barrier: static batches driven by the client — ``concurrency`` requests arrive together, the
  next batch when the last of them finished. A request's slot freed when the request in its
  position of the previous batch finished; arrival − that is its client queue wait.

TTFT and E2E add the fit's constant per-request overhead (HTTP, tokenisation); TPOT does not.
Occupancy is the time-weighted mean of running (admitted, not finished) and waiting (arrived,
not admitted) requests over the simulated run, as the polled gauges are over the measured one.
Error = predicted / measured − 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from harness.bench.lib.citations import cite
from harness.contract.distribution import PERCENTILE_METHOD
from harness.errors import InvalidInput
from harness.mech.calibrate.fitting import fit_to_measurements
from harness.mech.calibrate.plan import profiling_plan, read_measured
from harness.mech.engine.blocks import PlainPool
from harness.mech.engine.costmodel import StepCostModel, load_cost_model
from harness.mech.engine.engine import Engine, validate
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig, Seq, SimRequestRecord
from harness.mech.engine.workload import SimWorkload, read_workload

MODES = ("open", "closed", "barrier")


@dataclass(frozen=True)
class CostModel:
    """A step-cost model, its per-request TTFT overhead and where it came from."""

    model: StepCostModel
    overhead_ms: float
    source: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"coefficients": self.model.to_dict(), "ttft_overhead_ms": round(self.overhead_ms, 4),
                "source": dict(self.source)}


def cited_cost_model(manifest: str | Path, root: Path) -> CostModel:
    """The step-cost model of a signed `make mech-calibrate` run, audited first (an INVALID one is refused)."""
    citation = cite(manifest, root, semantic_id="INF-SERVING-SCHEDULER")
    path = citation.file("step_cost.json")
    if not path.is_file():
        raise InvalidInput(f"cited run {citation.run_dir} has no step_cost.json: cite a make mech-calibrate run")
    overhead = json.loads(path.read_text(encoding="utf-8"))["provenance"].get("ttft_overhead_ms", 0.0)
    return CostModel(load_cost_model(path), float(overhead), {"kind": "cited", **citation.to_dict(root)})


def engine_from(effective: Mapping[str, Any] | None, requested: Mapping[str, Any]) -> EngineConfig:
    """The simulator's engine settings from the server's effective config (vLLM keys), else what was requested."""
    eff = dict(effective or {})

    def pick(key: str, fallback: Any) -> Any:
        value = eff.get(key)
        return fallback if value is None else value

    return EngineConfig(
        max_num_seqs=int(pick("scheduler_config.max_num_seqs", requested.get("max_num_seqs") or 256)),
        max_num_batched_tokens=int(pick("scheduler_config.max_num_batched_tokens",
                                        requested.get("max_num_batched_tokens") or 8192)),
        policy=str(pick("scheduler_config.policy", "fcfs")),
        block_size=int(pick("cache_config.block_size", 16)),
        num_blocks=int(pick("cache_config.num_gpu_blocks", 65536)),
        chunked_prefill=bool(pick("scheduler_config.enable_chunked_prefill", True)))


def fit_from_profile(requests_path: Path, gap_s: float, engine: EngineConfig, source: Mapping[str, Any]) -> CostModel:
    """Fit the step-cost model to a calibration arm that replayed ``profiling_plan(1, gap_s)``."""
    measured = read_measured(requests_path)
    model, overhead_ms, stats = fit_to_measurements(profiling_plan(1, gap_s), measured, engine)
    return CostModel(model, overhead_ms, {**source, "fit": stats, "profile_requests": len(measured)})


def run_barrier(workload: SimWorkload, cfg: EngineConfig, cost: StepCostModel
                ) -> tuple[list[SimRequestRecord], dict[int, float]]:
    """Static batches driven by the client; the records and each request's slot-freed time (s)."""
    size = workload.concurrency or 1
    reqs = list(workload.requests)
    batches = [reqs[i:i + size] for i in range(0, len(reqs), size)]
    state = {"batch": 0, "left": len(batches[0])}

    def on_finish(_: Seq, now_s: float) -> list[Seq]:
        state["left"] -= 1
        if state["left"] or state["batch"] + 1 >= len(batches):
            return []
        state["batch"] += 1
        state["left"] = len(batches[state["batch"]])
        return [Seq(r, now_s) for r in batches[state["batch"]]]

    validate(cfg, max(r.input_tokens for r in reqs))
    run = Engine(cfg, cost, PlainPool(cfg.num_blocks, cfg.block_size), [Seq(r, 0.0) for r in batches[0]],
                 on_finish).run()
    finish = {r.index: r.finish_s for r in run.records}
    freed = {r.index: 0.0 for r in batches[0]}
    for prev, batch in zip(batches, batches[1:], strict=False):
        freed.update({r.index: finish[p.index] for p, r in zip(prev, batch, strict=False)})
    return run.records, freed


def simulate(workload: SimWorkload, cfg: EngineConfig, cost: StepCostModel, mode: str
             ) -> tuple[list[SimRequestRecord], dict[int, float]]:
    """Simulated records and each request's scheduled time (slot freed, or arrival) in one client mode."""
    if mode == "barrier":
        return run_barrier(workload, cfg, cost)
    if mode == "closed" and workload.concurrency is None:
        raise ValueError("a closed-loop prediction needs the workload's concurrency")
    run, _ = run_continuous(workload, cfg, cost)
    return run.records, {r.index: r.arrival_s for r in run.records}


def occupancy_steps(records: Sequence[SimRequestRecord]) -> list[tuple[float, int, int]]:
    """(time s, running, waiting) after every change: running = admitted and not finished, waiting = arrived
    and not admitted (one never admitted, larger than the KV pool, waits until it ends)."""
    deltas: dict[float, list[int]] = {}

    def add(t_s: float, d_running: int, d_waiting: int) -> None:
        cell = deltas.setdefault(t_s, [0, 0])
        cell[0] += d_running
        cell[1] += d_waiting

    for r in records:
        add(r.arrival_s, 0, 1)
        if r.admitted_s is None:
            add(r.finish_s, 0, -1)
        else:
            add(r.admitted_s, 1, -1)
            add(r.finish_s, -1, 0)
    out, running, waiting = [], 0, 0
    for t_s in sorted(deltas):
        running, waiting = running + deltas[t_s][0], waiting + deltas[t_s][1]
        out.append((t_s, running, waiting))
    return out


def occupancy(records: Sequence[SimRequestRecord]) -> dict[str, Any]:
    """Time-weighted mean and peak of running and waiting requests over [first arrival, last finish]."""
    steps = occupancy_steps(records)
    span = steps[-1][0] - steps[0][0]
    area_r = sum(r * (b[0] - t) for (t, r, _), b in zip(steps, steps[1:], strict=False))
    area_w = sum(w * (b[0] - t) for (t, _, w), b in zip(steps, steps[1:], strict=False))
    return {"running_mean": area_r / span if span else 0.0, "waiting_mean": area_w / span if span else 0.0,
            "running_peak": max(r for _, r, _ in steps), "waiting_peak": max(w for _, _, w in steps),
            "duration_s": span}


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q, method=PERCENTILE_METHOD)) if values else None


def predict(workload_path: Path, cfg: EngineConfig, cost: CostModel, mode: str,
            classes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The arm's predicted latency percentiles (ms), occupancy, throughput and preemptions (and per class)."""
    wl = read_workload(workload_path)
    records, scheduled = simulate(wl, cfg, cost.model, mode)
    done = [r for r in records if r.first_token_s is not None]
    out: dict[str, Any] = {"mode": mode, "engine": {"max_num_seqs": cfg.max_num_seqs, "policy": cfg.policy,
                                                    "max_num_batched_tokens": cfg.max_num_batched_tokens,
                                                    "block_size": cfg.block_size, "num_blocks": cfg.num_blocks}}
    out.update(latencies(done, scheduled, cost.overhead_ms))
    out["occupancy"] = occupancy(records)
    out["occupancy_series"] = [[round(t, 4), r, w] for t, r, w in occupancy_steps(records)]
    span = out["occupancy"]["duration_s"]
    out["output_tokens_per_s"] = sum(r.output_tokens for r in done) / span if span else None
    out["preemptions"] = sum(r.preemptions for r in records)
    if classes:
        priority = {r.index: r.priority for r in wl.requests}
        out["classes"] = {name: latencies([r for r in done if priority[r.index] == value], scheduled,
                                          cost.overhead_ms) for name, value in classes.items()}
    return out


def latencies(done: Sequence[SimRequestRecord], scheduled: Mapping[int, float], overhead_ms: float) -> dict[str, Any]:
    """P50/P99 of TTFT, TPOT, E2E and E2E from the scheduled time (client wait included), and the client wait."""
    ttft = [1000 * cast(float, r.ttft_s) + overhead_ms for r in done]  # done: requests that had a first token
    tpot = [1000 * t for t in (r.tpot_s for r in done) if t is not None]
    e2e = [1000 * r.e2e_s + overhead_ms for r in done]
    waited = [1000 * (r.finish_s - scheduled[r.index]) + overhead_ms for r in done]
    wait = [1000 * (r.arrival_s - scheduled[r.index]) for r in done]
    out: dict[str, Any] = {}
    for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e), ("e2e_from_scheduled_ms", waited),
                         ("queue_wait_client_ms", wait)):
        out[name] = {"p50": _pct(values, 50), "p99": _pct(values, 99)}
    return out


def error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured − 1, or None when either is missing or the measurement is zero."""
    if predicted is None or measured is None or measured == 0:
        return None
    return predicted / measured - 1
