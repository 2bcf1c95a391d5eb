"""Simulated requests per wall second of the batching engine on one core (target >= 20,000).

Runs a 100k-request Poisson workload (512 input / 128 output tokens on average)
through the continuous-batching engine with the default step-cost model, once
with analytic decode stretches and (with --compare) on a 10k-request slice
stepping every token, and prints the figures.
"""

from __future__ import annotations

import argparse
import os
import time

from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SimWorkload, SyntheticSpec, synthetic


def measure(workload: SimWorkload, engine: EngineConfig, prefix_cache: str = "none") -> tuple[float, object]:
    start = time.perf_counter()
    result, _ = run_continuous(workload, engine, StepCostModel(), prefix_cache)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate-rps", type=float, default=10.0)
    parser.add_argument("--compare", action="store_true", help="also time per-token stepping on a 10k slice")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, num_blocks=8192)
    workload = synthetic(SyntheticSpec(requests=args.requests, rate_rps=args.rate_rps, seed=0))
    wall_s, result = measure(workload, engine)
    print(f"requests               {args.requests}")
    print(f"wall seconds           {wall_s:.3f}")
    print(f"simulated req/s (wall) {args.requests / wall_s:,.0f}  (target >= 20,000)")
    print(f"simulated seconds      {result.end_s:.1f}")
    print(f"engine steps           {result.steps} ({result.jumps} analytic jumps)")
    if args.compare:
        small = synthetic(SyntheticSpec(requests=10_000, rate_rps=args.rate_rps, seed=0))
        fast_s, _ = measure(small, engine)
        slow_s, _ = measure(small, EngineConfig(**{**engine.__dict__, "analytic": False}))
        print(f"10k slice: analytic {10_000 / fast_s:,.0f} req/s, per-token stepping {10_000 / slow_s:,.0f} req/s")


if __name__ == "__main__":
    main()
