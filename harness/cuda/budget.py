"""Iteration budget: a batch x context sweep of real forward passes of one model.

Per cell: a prefill of ``batch`` sequences of ``context`` random tokens (the
KV cache it leaves is measured tensor by tensor and compared with
2 x layers x kv_heads x head_dim x dtype_bytes per token), then ``warmup``
untimed and ``iters`` timed decode steps of one token per sequence. Running
out of memory (``torch.OutOfMemoryError``, which is ``torch.cuda.OutOfMemoryError``)
is caught, the cell's tensors are freed, and whether memory came back is
checked; larger cells are then skipped (see ``sweep.py``). With
``--memory-cap-bytes`` the allocator is limited: on a GPU through
``set_per_process_memory_fraction`` (weights included), on CPU by a
``LiveTensorMeter`` over the prefill (activations and KV, weights excluded).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Failure, Performance
from harness.cuda.device import LiveTensorMeter, free_memory, import_torch, synchronize, time_calls
from harness.cuda.models import load_causal_lm, model_shape, random_llama
from harness.cuda.registry import CommonConfig, Experiment
from harness.cuda.runner import Outcome, RunContext, mechanism_workload
from harness.cuda.sweep import (
    Cell,
    boundary,
    dominated_by_oom,
    inflection,
)
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models.shapes import kv_bytes_per_token_heads

RECOVERY_SLACK_BYTES = 1 << 20


@dataclass(frozen=True)
class BudgetConfig(CommonConfig):
    warmup: int = knob(2, "untimed decode steps per cell", min=0, group="protocol")
    iters: int = knob(8, "timed decode steps per cell", min=1, group="protocol")
    arch: str = knob("smollm2-135m", "architecture for random weights (a Llama-architecture model of "
                     "harness.models.shapes, or tiny)")
    model: str = knob("", "the model to load with real weights, as MODEL= names it everywhere: a checkpoint "
                      "directory or a prepared model name (overrides --arch)")
    layers: int = knob(0, "decoder layers for random weights (0: the model's own count)", min=0, group="protocol")
    batches: tuple[int, ...] = knob((1, 2, 4), "batch sizes", min=1)
    contexts: tuple[int, ...] = knob((64, 128, 256), "context lengths", min=1)
    dtype: str = knob("auto", "auto: float32 on CPU, bfloat16 on GPU",
                      choices=("auto", "float32", "float16", "bfloat16"))
    memory_cap_bytes: int = knob(0, "allocator limit in bytes (0: none)", min=0, group="protocol")

    def check(self) -> None:
        super().check()
        if not self.batches or not self.contexts:
            raise InvalidInput("--batches and --contexts need at least one value each")
        if not self.model:
            model_shape(self.arch)


def kv_cache_bytes(cache: Any) -> int:
    """Bytes of every key and value tensor held by a transformers cache."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def forward_step(model, ids, cache=None):
    """One forward pass; returns (cache, greedy next token). transformers >= 5 names the cache ``cache``.

    Logits for the last position only (``logits_to_keep=1``): a prefill computing them for every position
    holds batch x context x vocab floats (for SmolLM2's 49k vocabulary about 4.3x the KV bytes per token), and
    the OOM boundary would then not be KV-bound.
    """
    params = inspect.signature(model.forward).parameters
    name = "cache" if "cache" in params else "past_key_values"
    kwargs = {"input_ids": ids, "use_cache": True}
    keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    if keep:
        kwargs[keep] = 1
    if cache is not None:
        kwargs[name] = cache
    out = model(**kwargs)
    return out[name], out.logits[:, -1:].argmax(-1)


def run_cell(model, batch: int, context: int, *, config: BudgetConfig, ctx: RunContext, gen) -> dict[str, Any]:
    """One cell of the sweep; an OOM is caught and reported with whether memory came back."""
    torch = import_torch()
    state: dict[str, Any] = {}
    base = free_memory(ctx.device)
    meter = LiveTensorMeter(config.memory_cap_bytes or None) if ctx.device == "cpu" else None
    cell: dict[str, Any] = {"batch": batch, "context": context}
    try:
        # Every tensor of the cell lives in `state`, so clearing it returns the cell's memory.
        state["ids"] = torch.randint(0, model.config.vocab_size, (batch, context), generator=gen).to(ctx.device)
        if ctx.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with torch.no_grad():
            if meter is not None:
                with meter:
                    state["cache"], state["next"] = forward_step(model, state["ids"])
            else:
                state["cache"], state["next"] = forward_step(model, state["ids"])
            synchronize(ctx.device)
            cell["prefill_ms"] = (time.perf_counter() - t0) * 1e3
            cell["kv_bytes"] = kv_cache_bytes(state["cache"])

            def step():
                state["cache"], state["next"] = forward_step(model, state["next"], state["cache"])

            timing = time_calls(step, device=ctx.device, warmup=config.warmup, iters=config.iters)
        if ctx.device == "cuda":
            cell["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated() - base)
        else:
            cell["peak_memory_bytes"] = int(meter.peak_bytes)
        cell.update(status="ok", step_ms=timing.summary())
        ctx.samples.write({"batch": batch, "context": context, "clock": timing.clock,
                           "prefill_ms": cell["prefill_ms"], "step_samples_ms": list(timing.samples_ms)})
    except torch.OutOfMemoryError as exc:
        # Only the message is kept: the traceback's frames hold the cell's tensors.
        cell.update(status="oom", message=str(exc).strip().splitlines()[0][:300])
    state.clear()
    after = free_memory(ctx.device)
    if cell.get("status") == "oom":
        leaked = meter.live_bytes if meter is not None else max(0, after - base)
        cell.update(memory_not_returned_bytes=int(leaked), recovered=leaked <= RECOVERY_SLACK_BYTES)
    return cell


def _load(config: BudgetConfig, ctx: RunContext, dtype: str):
    if config.model:
        loaded = load_causal_lm(config.model, device=ctx.device, dtype=dtype, seed=config.seed)
        return loaded.model, loaded.model_ref, loaded.tokenizer_ref
    overrides = {"num_hidden_layers": config.layers} if config.layers else {}
    model = random_llama(config.arch, seed=config.seed, device=ctx.device, dtype=dtype, **overrides)
    return model, None, None


def run(config: BudgetConfig, ctx: RunContext) -> Outcome:
    torch = import_torch()
    dtype = config.dtype if config.dtype != "auto" else ("bfloat16" if ctx.device == "cuda" else "float32")
    model, model_ref, tok_ref = _load(config, ctx, dtype)
    mc = model.config
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
    per_token = kv_bytes_per_token_heads(mc.num_hidden_layers, mc.num_key_value_heads, head_dim,
                                         torch.empty((), dtype=getattr(torch, dtype)).element_size())
    gen = torch.Generator(device="cpu").manual_seed(config.seed)
    capped_gpu = ctx.device == "cuda" and config.memory_cap_bytes > 0
    if capped_gpu:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, config.memory_cap_bytes / total))
    cells: list[dict[str, Any]] = []
    done: list[Cell] = []
    try:
        for b in sorted(set(config.batches)):
            for c in sorted(set(config.contexts)):
                blocker = dominated_by_oom(b, c, done)
                if blocker is not None:
                    cells.append({"batch": b, "context": c, "status": "skipped",
                                  "reason": f"at or beyond the OOM cell batch={blocker.batch} "
                                            f"context={blocker.context}"})
                    done.append(Cell(b, c, "skipped"))
                    continue
                cell = run_cell(model, b, c, config=config, ctx=ctx, gen=gen)
                if cell["status"] == "ok":
                    cell["kv_bytes_per_token"] = cell["kv_bytes"] / (b * c)
                cells.append(cell)
                done.append(Cell(b, c, cell["status"], cell.get("step_ms", {}).get("p50")))
    finally:
        if capped_gpu:
            torch.cuda.set_per_process_memory_fraction(1.0)
    return _outcome(config, ctx, dtype, cells, done, per_token, model_ref, tok_ref)


def _outcome(config, ctx, dtype, cells, done, per_token, model_ref, tok_ref) -> Outcome:
    ok = [c for c in cells if c["status"] == "ok"]
    ooms = [c for c in cells if c["status"] == "oom"]
    kv_match = bool(ok) and all(c["kv_bytes"] == per_token * c["batch"] * c["context"] for c in ok)
    unrecovered = [c for c in ooms if not c["recovered"]]
    failure = None
    if unrecovered:
        c = unrecovered[0]
        failure = Failure(stage="sweep", kind="oom", recovered=False,
                          message=f"memory not returned after OOM at batch={c['batch']} context={c['context']}: "
                                  f"{c['memory_not_returned_bytes']} bytes still allocated")
    elif not ok:
        failure = Failure(stage="sweep", kind="oom", recovered=True, message="no cell of the sweep fit in memory")
    bound, knee = boundary(done), inflection(done)
    lines = _cell_lines(cells)
    lines.append(f"KV bytes/token: formula {per_token}, measured {'equal' if kv_match else 'DIFFERENT'}; "
                 f"inflection batch {knee['inflection_batch']}"
                 f"{'' if knee['monotone'] else ' (unreliable: step time not monotone in batch)'}; "
                 f"largest fitting {bound['largest_fitting']}")
    model_name = model_ref["name"] if model_ref else config.arch
    return Outcome(
        run_label=f"budget/{model_name}/{dtype}",
        workload=mechanism_workload(config.seed, "cells run one after another, each a closed batch",
                                    request_count=sum(c["batch"] for c in ok),
                                    input_lengths=tuple(c["context"] for c in ok for _ in range(c["batch"])),
                                    output_lengths=tuple(config.warmup + config.iters + 1
                                                         for c in ok for _ in range(c["batch"])),
                                    max_num_seqs=max(config.batches)),
        performance=Performance.not_applicable(
            "sweep: per-cell decode step latency is in details.cells[].step_ms",
            peak_memory_bytes=max((c["peak_memory_bytes"] for c in ok), default=None),
            peak_memory_source="torch_cuda_max_allocated" if ctx.device == "cuda" else "torch_live_tensor_bytes")
        if ok else Performance.not_applicable("no cell of the sweep ran"),
        correctness=Correctness(
            output_count=len(ok), termination_counts={"length": sum(c["batch"] for c in ok)} if ok else {},
            quality={"metric": "kv_bytes_per_token_equals_formula", "value": kv_match, "passed": kv_match,
                     "reference": f"2*layers*kv_heads*head_dim*dtype_bytes = {per_token}"}),
        conclusion=Conclusion(
            evidence_level="single", decision="blocked" if failure and not failure.recovered else "inconclusive",
            failure=failure, summary=f"{len(ok)} cell(s) ran, {len(ooms)} OOM (caught), inflection batch "
                                     f"{knee['inflection_batch']}",
            next_step="repeat the grid on the target GPU (benchmarks/gpu_check.sh)" if ctx.device == "cpu"
            else "repeat the sweep three times to make the boundary and inflection repeated evidence"),
        details={"dtype": dtype, "kv_bytes_per_token_formula": per_token, "kv_bytes_match_formula": kv_match,
                 "memory_cap_bytes": config.memory_cap_bytes or None,
                 "memory_cap_scope": ("whole process (set_per_process_memory_fraction)" if ctx.device == "cuda"
                                      else "prefill activations and KV (LiveTensorMeter), weights excluded")
                 if config.memory_cap_bytes else None,
                 "cells": cells, "boundary": bound, "inflection": knee},
        summary_lines=tuple(lines),
        effective={"dtype": dtype, "layers": None if model_ref else (config.layers or "model default")},
        model=model_ref, tokenizer=tok_ref,
        model_null_reason=f"{config.arch} architecture with seeded random weights (no checkpoint)",
    )


def _cell_lines(cells: list[dict[str, Any]]) -> list[str]:
    """The sweep's table: a header, then one line per cell."""
    lines = [f"{'batch':>6}{'context':>8}{'status':>9}{'prefill_ms':>12}{'step_p50':>10}{'step_p95':>10}"
             f"{'peak_MiB':>10}"]
    for c in cells:
        if c["status"] == "ok":
            lines.append(f"{c['batch']:>6}{c['context']:>8}{'ok':>9}{c['prefill_ms']:>12.1f}"
                         f"{c['step_ms']['p50']:>10.2f}{c['step_ms']['p95']:>10.2f}"
                         f"{c['peak_memory_bytes'] / 2**20:>10.1f}")
        else:
            lines.append(f"{c['batch']:>6}{c['context']:>8}{c['status']:>9}  {c.get('message') or c.get('reason')}")
    return lines


EXPERIMENT = Experiment(
    name="budget", semantic_id="INF-ITERATION-BUDGET",
    help="batch x context sweep: decode step median/P95, KV bytes vs formula, peak memory, OOM boundary, inflection",
    config=BudgetConfig, run=run,
)
