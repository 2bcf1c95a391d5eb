"""Iteration budget (INF-ITERATION-BUDGET): KV bytes per token, block capacity, and the batch x context grid.

Capacity follows vLLM's rule: the KV pool is what is left of
``device_memory x utilization`` after the weights and the activation peak of a
``max_num_batched_tokens`` forward pass; it is cut into blocks of ``block_size``
tokens. A (batch, context) cell fits when ``batch x ceil(context / block_size)``
blocks fit in the pool; the OOM boundary is the largest batch that fits per context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Performance
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.mech import Mechanism, MechConfig
from harness.mech.output import MechOutput, config_ref, no_workload, save_figure, table
from harness.models.shapes import (
    DTYPE_BYTES,
    MODELS,
    ModelShape,
    dtype_bytes,
    get_model,
    kv_bytes_per_token,
)
from harness.report.plots import pyplot

GIB = 1 << 30


@dataclass(frozen=True)
class BudgetConfig(MechConfig):
    model: str = knob("Llama-3-8B", "model name from the built-in table (harness.models.shapes; see "
                      "docs/mechanisms.md)")
    kv_dtype: str = knob("bf16", "KV-cache dtype", choices=tuple(DTYPE_BYTES))
    weight_dtype: str = knob("bf16", "weight dtype for the weight footprint", choices=tuple(DTYPE_BYTES))
    device_memory_gib: float = knob(80.0, "device memory in GiB", min=0.001)
    gpu_memory_utilization: float = knob(0.9, "fraction of device memory the engine may use (vLLM's setting)",
                                         min=0.01, max=1.0, group="protocol")
    block_size: int = knob(16, "tokens per KV block", min=1, group="protocol")
    max_num_batched_tokens: int = knob(8192, "tokens in the profiling forward pass that sets the activation peak",
                                       min=1, group="protocol")
    activation_bytes: int | None = knob(None, "activation peak in bytes (default: estimated from the model)", min=0,
                                        group="protocol")
    batches: tuple[int, ...] = knob((1, 2, 4, 8, 16, 32, 64, 128, 256), "batch sizes of the grid", min=1)
    contexts: tuple[int, ...] = knob((512, 1024, 2048, 4096, 8192, 16384, 32768), "context lengths (tokens) of "
                                     "the grid", min=1)

    def check(self) -> None:
        get_model(self.model)
        if not self.batches or not self.contexts:
            raise InvalidInput("--batches and --contexts need at least one value each")


@dataclass(frozen=True)
class Capacity:
    kv_bytes_per_token: int
    block_bytes: int
    weight_bytes: int
    activation_bytes: int
    usable_bytes: int
    kv_pool_bytes: int
    num_blocks: int

    @property
    def max_tokens(self) -> int:
        return self.num_blocks * (self.block_bytes // self.kv_bytes_per_token)


def activation_peak_bytes(model: ModelShape, num_tokens: int, act_dtype: str = "bf16") -> int:
    """Estimated activation peak of one forward pass over ``num_tokens`` tokens.

    Live tensors at the MLP peak: the residual stream, the fused gate/up output
    (2 x intermediate) and the attention q/k/v projections, plus fp32 logits for
    one sampled token per sequence (bounded by the tokens in the pass).
    """
    size = dtype_bytes(act_dtype)
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim
    per_token = (2 * model.hidden_size + 2 * model.intermediate_size + qkv) * size
    return num_tokens * per_token + min(num_tokens, 256) * model.vocab_size * 4


def capacity(cfg: BudgetConfig, model: ModelShape) -> Capacity:
    per_token = kv_bytes_per_token(model, cfg.kv_dtype)
    block_bytes = per_token * cfg.block_size
    weights = model.params * dtype_bytes(cfg.weight_dtype)
    activation = (cfg.activation_bytes if cfg.activation_bytes is not None
                  else activation_peak_bytes(model, cfg.max_num_batched_tokens))
    usable = int(cfg.device_memory_gib * GIB * cfg.gpu_memory_utilization)
    pool = usable - weights - activation
    if usable <= weights:
        raise InvalidInput(f"{model.name} does not fit: weights need {weights / GIB:.2f} GiB, "
                           f"{usable / GIB:.2f} GiB usable ({cfg.device_memory_gib} GiB x "
                           f"{cfg.gpu_memory_utilization})")
    if pool < block_bytes:
        raise InvalidInput(f"KV budget {max(pool, 0) / GIB:.3f} GiB is smaller than one block "
                           f"({block_bytes} bytes) after weights {weights / GIB:.2f} GiB and activations "
                           f"{activation / GIB:.2f} GiB")
    return Capacity(per_token, block_bytes, weights, activation, usable, pool, pool // block_bytes)


def grid(cfg: BudgetConfig, cap: Capacity) -> list[dict[str, Any]]:
    """One row per (context, batch): KV bytes, peak memory, whether it fits the block pool."""
    rows = []
    for context in cfg.contexts:
        blocks_per_seq = math.ceil(context / cfg.block_size)
        for batch in cfg.batches:
            blocks = batch * blocks_per_seq
            kv = blocks * cap.block_bytes
            rows.append({
                "context": context, "batch": batch, "blocks": blocks, "kv_bytes": kv,
                "peak_bytes": cap.weight_bytes + cap.activation_bytes + kv,
                "fits": blocks <= cap.num_blocks,
            })
    return rows


def oom_boundary(cfg: BudgetConfig, cap: Capacity) -> list[dict[str, int]]:
    """Largest batch that fits per context: the inflection point where the next sequence OOMs."""
    return [{"context": c, "max_batch": cap.num_blocks // math.ceil(c / cfg.block_size)} for c in cfg.contexts]


def kv_table() -> list[dict[str, Any]]:
    """KV bytes per token of every known model in bf16/fp16/fp8."""
    return [{"model": m.name, "attention": m.attention,
             **{d: kv_bytes_per_token(m, d) for d in ("bf16", "fp16", "fp8")}} for m in MODELS.values()]


def run(cfg: BudgetConfig) -> MechOutput:
    model = get_model(cfg.model)
    cap = capacity(cfg, model)
    rows = grid(cfg, cap)
    boundary = oom_boundary(cfg, cap)
    per_dtype = {d: kv_bytes_per_token(model, d) for d in ("bf16", "fp16", "fp8")}
    known = kv_table()
    summary = "\n\n".join([
        table(["model", "attention", "KiB/token bf16", "KiB/token fp16", "KiB/token fp8"],
              [[r["model"], r["attention"], r["bf16"] / 1024, r["fp16"] / 1024, r["fp8"] / 1024] for r in known]),
        f"{model.name} ({model.attention.upper()}): KV {cap.kv_bytes_per_token} bytes/token "
        f"({cap.kv_bytes_per_token / 1024:.3f} KiB, {cfg.kv_dtype}); blocks of {cfg.block_size} tokens",
        table(["device GiB", "util", "weights GiB", "activation GiB", "KV pool GiB", "blocks", "max tokens"],
              [[cfg.device_memory_gib, cfg.gpu_memory_utilization, cap.weight_bytes / GIB,
                cap.activation_bytes / GIB, cap.kv_pool_bytes / GIB, cap.num_blocks, cap.max_tokens]]),
        table(["context", "max batch (OOM boundary)"], [[b["context"], b["max_batch"]] for b in boundary]),
        table(["context", "batch", "KV GiB", "peak GiB", "fits"],
              [[r["context"], r["batch"], r["kv_bytes"] / GIB, r["peak_bytes"] / GIB, r["fits"]] for r in rows]),
    ])
    fitting = [r["peak_bytes"] for r in rows if r["fits"]]
    perf = Performance.not_applicable("a KV-budget calculation has no serving latency",
                                      peak_memory_bytes=max(fitting) if fitting else cap.weight_bytes,
                                      peak_memory_source="model")
    details = {
        "kv_bytes_per_token": cap.kv_bytes_per_token, "kv_bytes_per_token_by_dtype": per_dtype, "kv_table": known,
        "capacity": {**cap.__dict__, "max_tokens": cap.max_tokens}, "oom_boundary": boundary, "grid": rows,
        "model_config": model.to_dict(), "effective": _effective(cfg, cap),
    }
    return MechOutput(
        semantic_id="INF-ITERATION-BUDGET", run_label=f"budget/{model.name}/{cfg.kv_dtype}",
        model=config_ref(model.name, model.to_dict()), workload=no_workload("no requests are served"),
        performance=perf,
        correctness=Correctness(output_count=0, termination_counts={}, quality={
            "metric": "oom_boundary_cells_fit", "value": True, "passed": True,
            "reference": "every cell at or below the boundary fits the block pool"}),
        conclusion=Conclusion(evidence_level="precheck", decision="inconclusive",
                              next_step="measure the same batch x context grid on a GPU (make cuda-budget)",
                              summary=f"{cap.num_blocks} blocks ({cap.max_tokens} tokens) of KV fit"),
        details=details, summary_text=summary, requested=_requested(cfg),
        plots={"budget.png": lambda path: _plot(cfg, cap, rows, boundary, path)},
    )


def _requested(cfg: BudgetConfig) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items()}


def _effective(cfg: BudgetConfig, cap: Capacity) -> dict[str, Any]:
    return {**_requested(cfg), "activation_bytes": cap.activation_bytes, "num_blocks": cap.num_blocks}


def _plot(cfg: BudgetConfig, cap: Capacity, rows: list[dict[str, Any]], boundary: list[dict[str, int]],
          path: Any) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for context in cfg.contexts:
        pts = [(r["batch"], r["peak_bytes"] / GIB) for r in rows if r["context"] == context]
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"context {context}")
    ax.axhline(cap.usable_bytes / GIB, color="red", linestyle="--", label="usable memory (OOM above)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("peak memory (GiB)")
    ax.set_title(f"{cfg.model} {cfg.kv_dtype}: peak memory vs batch; OOM boundary")
    ax.legend(fontsize=7)
    save_figure(fig, path)


MECHANISM = Mechanism("budget", BudgetConfig, run,
                      "KV bytes per token, block capacity, batch x context grid and OOM boundary")
