"""Dispatch: one real model block (a Llama decoder layer) run eagerly and under ``torch.compile``.

Per mode: the first call (trace + compile + run) is timed apart from the
steady state; outputs are compared with eager; dynamo's graph and
graph-break counts come from ``torch._dynamo.explain``. A compile mode the
device cannot use, or one that raises, is recorded as a fallback to eager
with the reason, not a crash.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Failure, Performance
from harness.cuda.device import import_torch, measure_peak_memory, synchronize, time_calls
from harness.cuda.models import llama_config, model_shape, seeded
from harness.cuda.registry import CommonConfig, Experiment
from harness.cuda.runner import Outcome, RunContext, mechanism_workload
from harness.knobs import knob

MODES = ("eager", "default", "reduce-overhead", "max-autotune")
# Agreement with eager, scale-aware: max|compiled - eager| <= atol + rtol * max|eager|. Fused kernels
# reorder reductions, so low-precision outputs differ by a few ulps of the output's scale.
AGREEMENT = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


@dataclass(frozen=True)
class DispatchConfig(CommonConfig):
    arch: str = knob("smollm2-135m", "architecture of the block, with seeded random weights (a Llama-architecture "
                     "model of harness.models.shapes, or tiny)")
    batch: int = knob(4, "sequences per call", min=1)
    seq_len: int = knob(128, "tokens per sequence", min=1)
    dtype: str = knob("auto", "auto: float32 on CPU, bfloat16 on GPU", choices=("auto", *AGREEMENT))
    modes: tuple[str, ...] = knob(("eager", "default", "max-autotune"), "modes to compare", choices=MODES)
    cpu_autotune: bool = knob(False, "also run max-autotune on CPU (minutes of GEMM tuning on few cores)",
                              group="protocol")

    def check(self) -> None:
        super().check()
        model_shape(self.arch)


def make_block(model: str, *, seed: int, device: str, dtype: str):
    """Decoder layer 0 of ``model`` with its rotary embedding: (batch, seq, hidden) -> same shape."""
    torch = import_torch()
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = llama_config(model, num_hidden_layers=1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rotary = LlamaRotaryEmbedding(config)
            self.layer = LlamaDecoderLayer(config, layer_idx=0)

        def forward(self, hidden):
            position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
            out = self.layer(hidden, position_ids=position_ids, position_embeddings=self.rotary(hidden, position_ids))
            return out[0] if isinstance(out, tuple) else out

    with seeded(seed):
        block = Block()
    return block.to(device=device, dtype=getattr(torch, dtype)).eval(), config


def skip_reason(mode: str, device: str, cpu_autotune: bool) -> str | None:
    """Why a mode is not attempted on this device, or None when it is."""
    if device == "cpu" and mode == "reduce-overhead":
        return "reduce-overhead captures CUDA graphs; there is no CPU equivalent"
    if device == "cpu" and mode == "max-autotune" and not cpu_autotune:
        return "max-autotune tunes GEMM templates for minutes on few CPU cores; enable with --cpu-autotune"
    return None


def _graph_breaks(block, x) -> dict[str, Any]:
    torch = import_torch()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x)
    torch._dynamo.reset()
    return {"graph_count": int(explained.graph_count), "graph_break_count": int(explained.graph_break_count),
            "break_reasons": [str(r.reason)[:200] for r in explained.break_reasons][:10]}


def _run_mode(mode: str, block, x, eager_out, config: DispatchConfig, ctx: RunContext, dtype: str) -> dict[str, Any]:
    torch = import_torch()
    entry: dict[str, Any] = {"mode": mode, "requested": mode}
    reason = skip_reason(mode, ctx.device, config.cpu_autotune)
    if reason:
        return {**entry, "ran": False, "path": "skipped", "fallback_reason": reason}
    fn = block
    t0 = time.perf_counter()
    try:
        if mode != "eager":
            torch._dynamo.reset()
            fn = torch.compile(block, mode=mode)
        with torch.no_grad():
            out = fn(x)
            synchronize(ctx.device)
    except Exception as exc:  # a backend compiler failure is evidence, not a crash
        return {**entry, "ran": False, "path": "eager-fallback",
                "fallback_reason": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
    first_call_ms = (time.perf_counter() - t0) * 1e3
    atol, rtol = AGREEMENT[dtype]
    err = (out.float() - eager_out.float()).abs()
    within = bool(err.max() <= atol + rtol * eager_out.float().abs().max())

    def call():
        with torch.no_grad():
            return fn(x)

    timing = time_calls(call, device=ctx.device, warmup=config.warmup, iters=config.iters)
    peak = measure_peak_memory(call, device=ctx.device)
    ctx.samples.write({"mode": mode, "clock": timing.clock, "samples_ms": list(timing.samples_ms)})
    return {**entry, "ran": True, "path": "eager" if mode == "eager" else "inductor",
            "first_call_ms": first_call_ms, "latency_ms": timing.summary(), "max_abs_diff_vs_eager": float(err.max()),
            "agrees": within, "peak_memory_bytes": peak.peak_bytes, "peak_memory_source": peak.source}


def run(config: DispatchConfig, ctx: RunContext) -> Outcome:
    torch = import_torch()
    dtype = config.dtype if config.dtype != "auto" else ("bfloat16" if ctx.device == "cuda" else "float32")
    block, model_config = make_block(config.arch, seed=config.seed, device=ctx.device, dtype=dtype)
    gen = torch.Generator(device="cpu").manual_seed(config.seed + 1)
    x = torch.randn(config.batch, config.seq_len, model_config.hidden_size,
                    generator=gen).to(ctx.device, getattr(torch, dtype))
    with torch.no_grad():
        eager_out = block(x)
    breaks = _graph_breaks(block, x) if any(m != "eager" for m in config.modes) else None
    modes = [_run_mode(m, block, x, eager_out, config, ctx, dtype) for m in dict.fromkeys(("eager", *config.modes))]
    torch._dynamo.reset()
    return _outcome(config, ctx, dtype, modes, breaks)


def _outcome(config: DispatchConfig, ctx: RunContext, dtype: str, modes: list[dict], breaks: dict | None) -> Outcome:
    ran = [m for m in modes if m["ran"]]
    disagree = [m["mode"] for m in ran if not m["agrees"]]
    fallbacks = [m for m in modes if not m["ran"]]
    failure = None
    if disagree:
        failure = Failure(stage="run", kind="correctness",
                          message=f"compiled output differs from eager: {', '.join(disagree)}")
    worst = max(ran, key=lambda m: m["max_abs_diff_vs_eager"])
    peak = max(ran, key=lambda m: m["peak_memory_bytes"])
    eager_p50 = ran[0]["latency_ms"]["p50"]
    lines = [f"{'mode':<16}{'path':<10}{'first_ms':>10}{'p50_ms':>10}{'p95_ms':>10}{'vs_eager':>9}{'max_abs':>11}"]
    for m in modes:
        if m["ran"]:
            m["speedup_vs_eager"] = eager_p50 / m["latency_ms"]["p50"]
            lines.append(f"{m['mode']:<16}{m['path']:<10}{m['first_call_ms']:>10.1f}{m['latency_ms']['p50']:>10.3f}"
                         f"{m['latency_ms']['p95']:>10.3f}{m['speedup_vs_eager']:>8.2f}x{m['max_abs_diff_vs_eager']:>11.2e}")
        else:
            lines.append(f"{m['mode']:<16}{m['path']}: {m['fallback_reason'][:100]}")
    if breaks:
        lines.append(f"dynamo: {breaks['graph_count']} graph(s), {breaks['graph_break_count']} graph break(s)")
    atol, rtol = AGREEMENT[dtype]
    return Outcome(
        run_label=f"dispatch/{config.arch}/{dtype}/b{config.batch}s{config.seq_len}",
        workload=mechanism_workload(config.seed, "one block called with a fixed batch", request_count=config.batch,
                                    input_lengths=(config.seq_len,) * config.batch, output_lengths=(0,) * config.batch),
        performance=Performance.not_applicable(
            "block micro-benchmark: per-mode latency is in details.modes[].latency_ms",
            peak_memory_bytes=peak["peak_memory_bytes"], peak_memory_source=peak["peak_memory_source"]),
        correctness=Correctness(
            output_count=len(ran), termination_counts={},
            quality={"metric": "max_abs_diff_vs_eager", "value": worst["max_abs_diff_vs_eager"], "threshold": atol,
                     "passed": not disagree, "reference": f"eager output; max|diff| <= {atol} + {rtol} * max|eager|"}),
        conclusion=Conclusion(
            evidence_level="single", decision="blocked" if failure else "inconclusive", failure=failure,
            next_step="run on the target GPU with every mode (benchmarks/gpu_check.sh)" if ctx.device == "cpu"
            else "pair the best compiled mode against eager over repeated runs",
            summary=f"{len(ran)} mode(s) ran, {len(fallbacks)} skipped or fell back; "
                    f"graph breaks: {breaks['graph_break_count'] if breaks else 'not traced'}"),
        details={"arch": config.arch, "dtype": dtype, "batch": config.batch, "seq_len": config.seq_len,
                 "modes": modes, "dynamo": breaks, "fallback_count": len(fallbacks)},
        summary_lines=tuple(lines),
        effective={"dtype": dtype, "modes_run": [m["mode"] for m in ran],
                   "modes_not_run": [m["mode"] for m in fallbacks]},
        model_null_reason=f"one decoder layer of the {config.arch} architecture with seeded random weights",
    )


EXPERIMENT = Experiment(
    name="dispatch", semantic_id="INF-EXECUTION-DISPATCH",
    help="eager vs torch.compile on a Llama decoder block: agreement, compile vs steady-state time, graph breaks",
    config=DispatchConfig, run=run,
)
