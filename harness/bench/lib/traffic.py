"""Readings of real-traffic workload pairs: a trace's measured hit rate beside its reuse ceiling and the
simulator's prediction, and session TTFT by turn index.

- Measured hit rate: the median over an arm's repeats of the server's prefix-cache hit rate (its counter
  deltas over the arm run; the cache is reset before each).
- Reuse ceiling: the share of prompt tokens a perfect prefix cache could reuse (the workload header's
  ``sharing``, ``harness.workload.traceio.sharing``); realised = measured / ceiling.
- Predicted: ``infkit mech kvcache``'s hashed-block cache replaying the same workload (same blocks, lengths
  and arrivals) with the server's KV block size and room for every block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.bench.metrics import PREFIX_HIT_RATE, TTFT
from harness.bench.records import ArmRun, completed_runs
from harness.bench.spec import History
from harness.workload import Workload, load_workload

KV_BLOCK_TOKENS = 16  # vLLM's default block size, when the server's effective one is not known


def measured_hit_rate(runs: Sequence[ArmRun], label: str) -> float | None:
    rates = [v for v in (PREFIX_HIT_RATE.run_value(r) for r in completed_runs(runs, label)) if v is not None]
    return round(float(np.median(rates)), 6) if rates else None


def predicted_hit_rate(workload: Workload, block_tokens: int = KV_BLOCK_TOKENS) -> float:
    """The simulator's hashed prefix cache over ``workload`` with room for every block."""
    from harness.mech.engine.costmodel import StepCostModel
    from harness.mech.engine.simulate import run_continuous
    from harness.mech.engine.types import EngineConfig
    from harness.mech.engine.workload import from_workload

    sim = from_workload(workload)
    total = sum(r.input_tokens + r.output_tokens for r in sim.requests)
    cfg = EngineConfig(block_size=block_tokens, num_blocks=total // block_tokens + len(sim.requests) + 1,
                       max_num_batched_tokens=max(2048, max(r.input_tokens for r in sim.requests)),
                       max_num_seqs=max(1, sim.concurrency or 32))
    _, pool = run_continuous(sim, cfg, StepCostModel(), "hashed")
    return round(pool.counters.hit_rate(), 6)


def server_block_tokens(history: History, server: str) -> int:
    effective = (history.servers.get(server) or {}).get("effective") or {}
    value = effective.get("cache_config.block_size")
    return int(value) if isinstance(value, int) and value > 0 else KV_BLOCK_TOKENS


def trace_reading(history: History, workload: str, treatment: str, baseline: str, server: str) -> dict[str, Any]:
    made = history.workloads.get(workload)
    w = load_workload(made.path) if made is not None else None
    sharing = (w.header.get("sharing") if w else None) or {}
    ceiling = sharing.get("reuse_ceiling")
    measured = measured_hit_rate(history.runs, treatment)
    block = server_block_tokens(history, server)
    return {"reuse_ceiling": ceiling, "measured_hit_rate": measured,
            "measured_hit_rate_twin": measured_hit_rate(history.runs, baseline),
            "realised_share_of_ceiling": round(measured / ceiling, 6) if measured is not None and ceiling else None,
            "predicted_hit_rate": predicted_hit_rate(w, block) if w is not None and sharing else None,
            "kv_block_tokens": block, "trace_block_tokens": sharing.get("block_tokens"),
            "distinct_blocks": sharing.get("distinct_blocks")}


def ttft_by_turn(runs: Sequence[ArmRun], label: str) -> list[dict[str, Any]]:
    """TTFT P50/P99 and the prefix hit rate by turn index, pooled over the arm's repeats."""
    by_turn: dict[int, list[Any]] = {}
    for run in completed_runs(runs, label):
        for rec in run.records:
            if "turn" in rec.extra:
                by_turn.setdefault(rec.extra["turn"], []).append(rec)
    rows = []
    for turn in sorted(by_turn):
        recs = by_turn[turn]
        ttft = np.asarray(TTFT(recs), dtype=float)
        cached = [(r.cached_tokens, r.prompt_tokens) for r in recs if r.completed and r.cached_tokens is not None
                  and r.prompt_tokens]
        prompts = [r.prompt_tokens for r in recs if r.completed and r.prompt_tokens is not None]
        rows.append({"turn": turn, "requests": len(recs), "completed": sum(r.completed for r in recs),
                     "ttft_p50_ms": round(float(np.percentile(ttft, 50)), 3) if ttft.size else None,
                     "ttft_p99_ms": round(float(np.percentile(ttft, 99)), 3) if ttft.size else None,
                     "prompt_tokens_mean": round(float(np.mean(prompts)), 1) if prompts else None,
                     "prefix_hit_rate": round(sum(c for c, _ in cached) / sum(p for _, p in cached), 6)
                     if cached else None})
    return rows


def trace_lines(name: str, got: dict[str, Any]) -> list[str]:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"
    return [f"{name}: reuse ceiling {fmt(got['reuse_ceiling'])}, measured hit rate {fmt(got['measured_hit_rate'])} "
            f"(twin {fmt(got['measured_hit_rate_twin'])}), {fmt(got['realised_share_of_ceiling'])} of the ceiling "
            f"realised; predicted by the simulator {fmt(got['predicted_hit_rate'])} "
            f"({got['kv_block_tokens']}-token KV blocks)"]


def turn_lines(label: str, rows: list[dict[str, Any]]) -> list[str]:
    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)
    return [f"{label} by turn: " + "; ".join(
        f"turn {r['turn']}: TTFT p50 {fmt(r['ttft_p50_ms'], '.1f')} / p99 {fmt(r['ttft_p99_ms'], '.1f')} ms, "
        f"prompt {fmt(r['prompt_tokens_mean'], '.0f')} tok, hit {fmt(r['prefix_hit_rate'], '.2f')}" for r in rows)]
