"""KV lifecycle and reuse (INF-PREFIX-CACHE mechanism): two prefix caches on the paired prefix workloads.

Runs the shared-prefix workload and its unique-prefix twin (same lengths and
arrivals, nothing shared) through the batching engine with each block manager
(vLLM-style hashed blocks, SGLang-style radix tree, and no cache), and reports
the managers' counters and the TTFT effect of reuse.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.contract import Conclusion
from harness.errors import InvalidInput
from harness.ids import sha256_canonical, sha256_file
from harness.knobs import knob
from harness.mech import Mechanism, MechConfig
from harness.mech.batching import engine_config, workload_info
from harness.mech.engine import metrics
from harness.mech.engine.costmodel import StepCostModel, load_cost_model
from harness.mech.engine.queues import POLICIES
from harness.mech.engine.simulate import POOLS, run_continuous
from harness.mech.engine.workload import (
    SimRequest,
    SimWorkload,
    SyntheticSpec,
    paired_prefix_workloads,
    read_workload,
)
from harness.mech.output import MechOutput, save_figure, table
from harness.report.plots import pyplot
from harness.workload.traceio import FORMATS as TRACE_FORMATS
from harness.workload.traceio import TraceSlice, check_slice, scaled_rows, sharing


@dataclass(frozen=True)
class KvCacheConfig(MechConfig):
    shared_workload: str | None = knob(None, "shared-prefix workload file (with --unique-workload); default: "
                                       "synthetic pair")
    unique_workload: str | None = knob(None, "its unique-prefix twin")
    trace: str | None = knob(None, "replay a trace file and its twin instead (same slice and block scaling as "
                             "`infkit workload make trace`)")
    trace_format: str = knob("mooncake", "trace format", choices=TRACE_FORMATS)
    trace_block_tokens: int = knob(512, "trace: tokens per hash-id block in the file", min=1, group="protocol")
    trace_rescale: int | None = knob(None, "trace: rescale every block to this many tokens (--block-tokens of "
                                     "workload make)", min=1, group="protocol")
    time_scale: float = knob(1.0, "trace: multiply arrival offsets", min=1e-9, group="protocol")
    max_requests: int | None = knob(None, "trace: the first N requests of the slice", min=1, group="protocol")
    window: str | None = knob(None, "trace: START:END seconds after the first request", group="protocol")
    concurrency: int | None = knob(None, "trace: replay as a closed loop with this many in flight (default: "
                                   "the trace's arrival times)", min=1, group="protocol")
    requests: int = knob(400, "synthetic: requests per arm", min=1)
    rate_rps: float = knob(4.0, "synthetic: Poisson arrival rate", min=0.001)
    groups: int = knob(8, "synthetic: prefix groups", min=1)
    prefix_tokens: int = knob(1536, "synthetic: shared prefix length per group", min=0)
    input_mean: int = knob(1900, "synthetic: mean prompt tokens (prefix included)", min=1)
    output_mean: int = knob(64, "synthetic: mean output tokens", min=1)
    seed: int = knob(0, "synthetic: base seed", min=0, group="protocol")
    managers: tuple[str, ...] = knob(("none", "hashed", "radix"), "block managers to compare", choices=tuple(POOLS))
    policy: str = knob("fcfs", "waiting-queue policy", choices=POLICIES, group="protocol")
    max_num_batched_tokens: int = knob(2048, "token budget per engine step", min=1, group="protocol")
    max_num_seqs: int = knob(32, "running sequences per step", min=1, group="protocol")
    block_size: int = knob(16, "tokens per KV block", min=1, group="protocol")
    num_blocks: int = knob(2048, "KV blocks in the pool (capacity)", min=1, group="protocol")
    chunked_prefill: bool = knob(True, "split long prompts across steps", group="protocol")
    cost_model: str | None = knob(None, "step_cost.json from infkit mech calibrate", group="protocol")

    def check(self) -> None:
        if bool(self.shared_workload) != bool(self.unique_workload):
            raise InvalidInput("give both --shared-workload and --unique-workload, or neither")
        if self.trace and self.shared_workload:
            raise InvalidInput("give --trace or --shared-workload/--unique-workload, not both")
        if self.trace:
            check_slice(self.trace_slice())
        if not self.shared_workload and self.prefix_tokens >= self.input_mean:
            raise InvalidInput(f"--prefix-tokens ({self.prefix_tokens}) must be below --input-mean "
                               f"({self.input_mean})")
        engine_config(self)  # the engine's own cross-field rules (token budget >= running sequences)

    def trace_slice(self) -> TraceSlice:
        return TraceSlice(trace_format=self.trace_format, trace_block_tokens=self.trace_block_tokens,
                          block_tokens=self.trace_rescale, time_scale=self.time_scale, max_requests=self.max_requests,
                          window=self.window)


def trace_pair(path: str, spec: TraceSlice, concurrency: int | None = None) -> tuple[SimWorkload, SimWorkload, float]:
    """A trace and its twin as the simulator sees them (the rows ``infkit workload make trace`` makes), and the
    trace's reuse ceiling."""
    rows, _ = scaled_rows(path, spec)
    closed = concurrency is not None
    shared = tuple(SimRequest(i, None if closed else r.t_s, r.input_tokens, r.output_tokens,
                              blocks=tuple(r.hash_ids or ()), block_tokens=spec.block if r.hash_ids else 0)
                   for i, r in enumerate(rows))
    unique = tuple(SimRequest(r.index, r.arrival_s, r.input_tokens, r.output_tokens) for r in shared)
    arrival = {"process": "closed"} if closed else {"process": "trace"}
    wid = sha256_canonical({"trace": sha256_file(path), "slice": asdict(spec), "concurrency": concurrency})
    return (SimWorkload(shared, wid, "trace", arrival, {}, concurrency),
            SimWorkload(unique, sha256_canonical({"twin": wid}), "trace-unique", arrival, {}, concurrency),
            sharing(rows, spec.block)["reuse_ceiling"])

def paired(cfg: KvCacheConfig) -> tuple[SimWorkload, SimWorkload]:
    if cfg.trace:
        return trace_pair(cfg.trace, cfg.trace_slice(), cfg.concurrency)[:2]
    if cfg.shared_workload and cfg.unique_workload:
        return read_workload(cfg.shared_workload), read_workload(cfg.unique_workload)
    return paired_prefix_workloads(SyntheticSpec(
        requests=cfg.requests, rate_rps=cfg.rate_rps, input_mean=cfg.input_mean, output_mean=cfg.output_mean,
        groups=cfg.groups, prefix_tokens=cfg.prefix_tokens, seed=cfg.seed, spread=0.2))


def run(cfg: KvCacheConfig) -> MechOutput:
    shared, unique = paired(cfg)
    cost = load_cost_model(cfg.cost_model) if cfg.cost_model else StepCostModel()
    ecfg = engine_config(cfg)
    cells: dict[str, dict[str, Any]] = {}
    for manager in cfg.managers:
        for arm, wl in (("shared", shared), ("unique", unique)):
            result, pool = run_continuous(wl, ecfg, cost, manager)
            cells[f"{manager}/{arm}"] = {**metrics.summarize(result), "kv": pool.counters.as_dict()}
    effects = {}
    for manager in cfg.managers:
        s, u = cells[f"{manager}/shared"], cells[f"{manager}/unique"]
        effects[manager] = {"ttft_p50_ratio_shared_over_unique": round(s["ttft_ms"]["p50"] / u["ttft_ms"]["p50"], 6),
                            "hit_rate_shared": s["kv"]["hit_rate"], "hit_rate_unique": u["kv"]["hit_rate"]}
    rows = [[name, c["kv"]["hit_rate"], c["kv"]["hit_tokens"], c["kv"]["references"], c["kv"]["evictions"],
             c["kv"]["reclaimed_blocks"], c["kv"]["peak_used_blocks"], c["ttft_ms"]["p50"], c["ttft_ms"]["p95"],
             c["preemptions"]] for name, c in cells.items()]
    best = min((m for m in cfg.managers if m != "none"), default=cfg.managers[0],
               key=lambda m: effects[m]["ttft_p50_ratio_shared_over_unique"])
    main = cells[f"{best}/shared"]
    trace = None
    if cfg.trace:
        ceiling = trace_pair(cfg.trace, cfg.trace_slice(), cfg.concurrency)[2]
        trace = {"reuse_ceiling": ceiling,
                 "predicted_hit_rate": {m: effects[m]["hit_rate_shared"] for m in cfg.managers}}
    summary = (f"paired workloads: shared {shared.workload_id} / unique {unique.workload_id}; capacity "
               f"{cfg.num_blocks} blocks x {cfg.block_size} tokens; simulated ms\n\n"
               + table(["manager/arm", "hit rate", "hit tokens", "references", "evictions", "reclaimed",
                        "peak blocks", "TTFT p50", "TTFT p95", "preemptions"], rows)
               + "\n\n" + table(["manager", "TTFT p50 shared/unique", "hit rate shared", "hit rate unique"],
                                [[m, e["ttft_p50_ratio_shared_over_unique"], e["hit_rate_shared"],
                                  e["hit_rate_unique"]] for m, e in effects.items()]))
    if trace:
        summary += (f"\n\ntrace {cfg.trace}: reuse ceiling {trace['reuse_ceiling']:.4f}; predicted hit rate "
                    + ", ".join(f"{m} {v:.4f}" for m, v in trace["predicted_hit_rate"].items()))
    return MechOutput(
        semantic_id="INF-PREFIX-CACHE", run_label=f"kvcache/{best}/shared", model=None,
        model_null_reason="the step-cost model stands in for the model",
        workload=workload_info(shared, ecfg, cfg.seed), performance=metrics.performance(main),
        correctness=metrics.correctness(main, len(shared.requests)),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="measure the same paired workloads on a server (make bench-69)",
                              summary=f"{best}: TTFT p50 x{effects[best]['ttft_p50_ratio_shared_over_unique']:.3f} "
                                      f"shared vs unique at hit rate {effects[best]['hit_rate_shared']:.3f}"),
        details={"cells": cells, "effects": effects, "unique_workload_id": unique.workload_id, "trace": trace,
                 "cost_model": cost.to_dict(), "effective": {**asdict(cfg), "engine": asdict(ecfg)}},
        summary_text=summary, requested=asdict(cfg), workload_id=shared.workload_id,
        plots={"kvcache.png": lambda path: _plot(cells, cfg.managers, path)},
    )


def _plot(cells: dict[str, dict[str, Any]], managers: tuple[str, ...], path: Any) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    xs = range(len(managers))
    for off, arm in ((-0.2, "shared"), (0.2, "unique")):
        ax1.bar([x + off for x in xs], [cells[f"{m}/{arm}"]["ttft_ms"]["p50"] for m in managers], 0.4, label=arm)
        ax2.bar([x + off for x in xs], [cells[f"{m}/{arm}"]["kv"]["hit_rate"] for m in managers], 0.4, label=arm)
    for ax, label in ((ax1, "TTFT p50 (simulated ms)"), (ax2, "prefix-cache hit rate")):
        ax.set_xticks(list(xs), managers)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle("shared vs unique prefix, by block manager")
    save_figure(fig, path)


MECHANISM = Mechanism("kvcache", KvCacheConfig, run,
                      "hashed-block and radix prefix caches on the paired prefix workloads")
