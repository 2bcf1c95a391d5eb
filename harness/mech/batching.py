"""Continuous batching (INF-CONTINUOUS-BATCHING): static vs continuous vs P/D-disaggregated serving, simulated.

Reads an infkit workload file (``workload``) or generates one from the
synthetic parameters; latencies are simulated milliseconds from the step-cost
model (``cost_model``: a JSON file written by ``infkit mech calibrate``, or the
built-in defaults).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.contract import Conclusion, WorkloadInfo
from harness.contract.distribution import token_summary
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.mech import Mechanism, MechConfig
from harness.mech.engine import metrics
from harness.mech.engine.costmodel import StepCostModel, load_cost_model
from harness.mech.engine.queues import POLICIES
from harness.mech.engine.simulate import (
    MODES,
    POOLS,
    HandOff,
    run_continuous,
    run_disaggregated,
    run_static,
)
from harness.mech.engine.types import EngineConfig, EngineRun
from harness.mech.engine.workload import SimWorkload, SyntheticSpec, read_workload, synthetic
from harness.mech.output import MechOutput, config_ref, save_figure, table
from harness.models.shapes import get_model, kv_bytes_per_token
from harness.report.plots import pyplot


@dataclass(frozen=True)
class BatchingConfig(MechConfig):
    workload: str | None = knob(None, "infkit workload file (JSONL); default: a synthetic Poisson workload from "
                                "the options below")
    requests: int = knob(2000, "synthetic: number of requests", min=1)
    rate_rps: float = knob(8.0, "synthetic: Poisson arrival rate (requests/s)", min=0.001)
    input_mean: int = knob(512, "synthetic: mean prompt tokens (uniform +-50%)", min=1)
    output_mean: int = knob(128, "synthetic: mean output tokens (uniform +-50%)", min=1)
    seed: int = knob(0, "synthetic: base seed (one derived seed per random dimension)", min=0, group="protocol")
    modes: tuple[str, ...] = knob(("static", "continuous", "disaggregated"), "serving modes", choices=MODES)
    policy: str = knob("fcfs", "waiting-queue policy", choices=POLICIES)
    prefix_cache: str = knob("none", "prefix cache: none, hashed (vLLM), radix (SGLang)", choices=tuple(POOLS))
    max_num_batched_tokens: int = knob(2048, "token budget per engine step", min=1, group="protocol")
    max_num_seqs: int = knob(64, "running sequences per step", min=1, group="protocol")
    block_size: int = knob(16, "tokens per KV block", min=1, group="protocol")
    num_blocks: int = knob(8192, "KV blocks in the pool", min=1, group="protocol")
    chunked_prefill: bool = knob(True, "split long prompts across steps", group="protocol")
    queue_timeout_s: float | None = knob(None, "finish a request that waited this long without being scheduled "
                                         "as timeout", min=0.001, group="protocol")
    cost_model: str | None = knob(None, "step_cost.json from infkit mech calibrate (default: built-in coefficients)",
                                  group="protocol")
    model: str = knob("Llama-3-8B", "model whose KV bytes/token size the P/D hand-off")
    kv_bandwidth_gbps: float = knob(100.0, "P/D link bandwidth (Gb/s)", min=0.001, group="protocol")
    kv_latency_ms: float = knob(0.5, "P/D link latency per transfer (ms)", min=0.0, group="protocol")
    overlap: bool = knob(True, "stream the KV layer by layer during prefill (only the excess is exposed)",
                         group="protocol")

    def check(self) -> None:
        if not self.modes:
            raise InvalidInput("--modes needs at least one mode", hint="choose from " + ", ".join(MODES))
        get_model(self.model)
        engine_config(self)  # the engine's own cross-field rules (token budget >= running sequences)


def engine_config(cfg: Any, **overrides: Any) -> EngineConfig:
    fields = ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks", "chunked_prefill", "policy",
              "queue_timeout_s")
    return EngineConfig(**{**{f: getattr(cfg, f, None) for f in fields}, **overrides})


def load_requests(cfg: Any) -> SimWorkload:
    if cfg.workload:
        return read_workload(cfg.workload)
    return synthetic(SyntheticSpec(requests=cfg.requests, rate_rps=cfg.rate_rps, input_mean=cfg.input_mean,
                                   output_mean=cfg.output_mean, seed=cfg.seed))


def workload_info(wl: SimWorkload, ecfg: EngineConfig, seed: int) -> WorkloadInfo:
    arrival = {k: v for k, v in wl.arrival.items() if k in ("process", "rate_rps", "burstiness")}
    info = WorkloadInfo(
        request_count=len(wl.requests), input_tokens=token_summary([r.input_tokens for r in wl.requests]),
        output_tokens=token_summary([r.output_tokens for r in wl.requests]), arrival=arrival,
        concurrency=wl.concurrency, seed=seed, kind=wl.kind, seeds=wl.seeds or None,
        token_budget={"max_num_batched_tokens": ecfg.max_num_batched_tokens, "max_num_seqs": ecfg.max_num_seqs,
                      "block_size": ecfg.block_size})
    if wl.concurrency is None:
        info.null_reasons["concurrency"] = "open loop: requests arrive at their offsets"
    return info


def simulate_modes(cfg: BatchingConfig, wl: SimWorkload, cost: StepCostModel) -> dict[str, dict[str, Any]]:
    ecfg = engine_config(cfg)
    out: dict[str, dict[str, Any]] = {}
    runs: dict[str, EngineRun] = {}
    for mode in cfg.modes:
        extra: dict[str, Any] = {}
        if mode == "continuous":
            runs[mode], pool = run_continuous(wl, ecfg, cost, cfg.prefix_cache)
            extra["kv"] = pool.counters.as_dict()
        elif mode == "static":
            runs[mode] = run_static(wl, ecfg, cost)
        else:
            handoff = HandOff(kv_bytes_per_token(get_model(cfg.model)), cfg.kv_bandwidth_gbps, cfg.kv_latency_ms,
                              cfg.overlap)
            runs[mode], extra["handoff"] = run_disaggregated(wl, ecfg, cost, handoff, cfg.prefix_cache)
        out[mode] = {**metrics.summarize(runs[mode]), **extra}
    return out


def run(cfg: BatchingConfig) -> MechOutput:
    wl = load_requests(cfg)
    cost = load_cost_model(cfg.cost_model) if cfg.cost_model else StepCostModel()
    ecfg = engine_config(cfg)
    results = simulate_modes(cfg, wl, cost)
    primary = "continuous" if "continuous" in results else cfg.modes[0]
    main = results[primary]
    rows = [[mode, r["ttft_ms"]["p50"], r["ttft_ms"]["p99"], (r["tpot_ms"] or {}).get("p50"),
             (r["tpot_ms"] or {}).get("p99"), r["queue_wait_ms"]["p50"], r["occupancy"]["mean_batch_when_busy"],
             r["throughput"]["output_tokens_per_s"], r["preemptions"]] for mode, r in results.items()]
    summary = (f"workload {wl.workload_id} ({wl.kind}, {len(wl.requests)} requests); simulated ms\n\n"
               + table(["mode", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "queue p50", "mean batch",
                        "out tok/s", "preemptions"], rows))
    if "disaggregated" in results:
        h = results["disaggregated"]["handoff"]
        summary += (f"\n\nP/D hand-off per request: transfer {h['transfer_ms_mean']:.3f} ms, exposed "
                    f"{h['exposed_ms_mean']:.3f} ms, overlapped {h['overlapped_ms_mean']:.3f} ms")
    model = get_model(cfg.model)
    return MechOutput(
        semantic_id="INF-CONTINUOUS-BATCHING", run_label=f"batching/{primary}/{cfg.policy}",
        model=config_ref(model.name, model.to_dict()) if "disaggregated" in results else None,
        model_null_reason="the step-cost model stands in for the model", workload=workload_info(wl, ecfg, cfg.seed),
        performance=metrics.performance(main), correctness=metrics.correctness(main, len(wl.requests)),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="compare with a measured serving run (make bench-70) and calibrate "
                                        "the step-cost model (infkit mech calibrate)",
                              summary=f"primary mode {primary}; simulated, not measured"),
        details={"modes": results, "primary_mode": primary, "cost_model": cost.to_dict(),
                 "effective": {**asdict(cfg), "engine": asdict(ecfg)}},
        summary_text=summary, requested=asdict(cfg), workload_id=wl.workload_id,
        plots={"batching.png": lambda path: _plot(results, path)},
    )


def _plot(results: dict[str, dict[str, Any]], path: Any) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    modes = list(results)
    for ax, metric in zip(axes, ("ttft_ms", "tpot_ms"), strict=True):
        for j, q in enumerate(("p50", "p95", "p99")):
            values = [(results[m][metric] or {}).get(q, 0) for m in modes]
            ax.bar([i + 0.27 * (j - 1) for i in range(len(modes))], values, width=0.27, label=q)
        ax.set_xticks(range(len(modes)), modes)
        ax.set_yscale("log")
        ax.set_ylabel(f"{metric.removesuffix('_ms').upper()} (simulated ms)")
        ax.legend(fontsize=7)
    fig.suptitle("static vs continuous vs disaggregated")
    save_figure(fig, path)


MECHANISM = Mechanism("batching", BatchingConfig, run, "static vs continuous vs disaggregated serving, simulated")
