"""Attention: explicit matmul-softmax-matmul vs ``scaled_dot_product_attention`` per backend.

Every variant runs on the same seeded q, k, v (shape batch x heads x seq x
head_dim) and is compared with an explicit float64 reference: max absolute and
max relative difference. The SDPA kernel that actually ran is read from the
aten ops a ``TorchDispatchMode`` sees (``_scaled_dot_product_flash_attention``,
``..._efficient_attention``, ``..._cudnn_attention``, or the math
decomposition); a requested backend the device cannot run is recorded as a
fallback with torch's own reason instead of stopping the run.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Failure, Performance
from harness.cuda.device import import_torch, measure_peak_memory, time_calls
from harness.cuda.registry import CommonConfig, Experiment
from harness.cuda.runner import Outcome, RunContext, mechanism_workload
from harness.knobs import knob

# Requested name -> torch.nn.attention.SDPBackend member; "auto" lets torch choose.
BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
# aten op (as a TorchDispatchMode sees it) -> kernel path name.
KERNEL_OPS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash_cpu"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention_forward", "flash"),
    ("_scaled_dot_product_efficient_attention", "efficient"),
    ("_efficient_attention_forward", "efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_safe_softmax", "math"),
    ("_softmax", "math"),
)
# Max abs difference vs the float64 reference that still counts as agreement.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2, "float64": 1e-10}


@dataclass(frozen=True)
class AttentionConfig(CommonConfig):
    batch: int = knob(2, "sequences per call", min=1)
    heads: int = knob(8, "attention heads", min=1)
    seq_len: int = knob(512, "query and key length", min=1)
    head_dim: int = knob(64, "per-head dimension", min=1)
    dtype: str = knob("auto", "auto: float32 on CPU, float16 on GPU", choices=("auto", *TOLERANCE))
    causal: bool = knob(True, "causal mask")
    backends: tuple[str, ...] = knob(("auto", "math", "flash", "efficient", "cudnn"), "SDPA backends to request",
                                     choices=("auto", *BACKENDS))


def explicit_attention(q, k, v, causal: bool):
    """softmax(q k^T / sqrt(d)) v, written out; the baseline and (in float64) the reference."""
    torch = import_torch()
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (b, h, s, s)
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def kernel_path(op_names: list[str]) -> str:
    """The attention kernel a list of dispatched aten op names shows (``unknown`` if none matches)."""
    for op, path in KERNEL_OPS:
        if op in op_names:
            return path
    return "unknown"


def dispatched_ops(fn) -> list[str]:
    """Names of the aten ops ``fn`` dispatches (the level where SDPA picks its kernel)."""
    torch = import_torch()
    from torch.utils._python_dispatch import TorchDispatchMode

    names: list[str] = []

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), _Recorder():
        fn()
    return names


def _sdpa_call(q, k, v, causal: bool, backend: str):
    torch = import_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call():
        if backend == "auto":
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel([getattr(SDPBackend, BACKENDS[backend])]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def _probe(call, backend: str, device: str) -> tuple[str | None, str | None]:
    """Run one call; (kernel path, None) when it ran, (None, torch's reasons) when it could not."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return kernel_path(dispatched_ops(call)), None
        except RuntimeError as exc:
            reasons = [str(w.message).strip() for w in caught if str(w.message).strip()]
            torch = import_torch()
            head = f"torch {torch.__version__} has no usable {backend} SDPA kernel on {device} for these inputs"
            return None, "; ".join([head, *reasons, str(exc).strip()])


def _diff(out, ref) -> dict[str, float]:
    torch = import_torch()
    err = (out.double() - ref).abs()
    rel = err / ref.abs().clamp_min(1e-6)
    return {"max_abs_diff": float(err.max()), "max_rel_diff": float(rel.max()),
            "finite": bool(torch.isfinite(out).all())}


def run(config: AttentionConfig, ctx: RunContext) -> Outcome:
    torch = import_torch()
    dtype_name = config.dtype if config.dtype != "auto" else ("float16" if ctx.device == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cpu").manual_seed(config.seed)
    shape = (config.batch, config.heads, config.seq_len, config.head_dim)
    q64, k64, v64 = (torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(3))
    ref = explicit_attention(q64.to(ctx.device), k64.to(ctx.device), v64.to(ctx.device), config.causal)
    q, k, v = (t.to(device=ctx.device, dtype=dtype) for t in (q64, k64, v64))

    arms: list[tuple[str, str, Any]] = [("explicit", "explicit", lambda: explicit_attention(q, k, v, config.causal))]
    arms += [(f"sdpa:{b}", b, _sdpa_call(q, k, v, config.causal, b)) for b in config.backends]
    variants = []
    for label, requested, call in arms:
        kernel, reason = ("explicit", None) if requested == "explicit" else _probe(call, requested, ctx.device)
        entry: dict[str, Any] = {"variant": label, "requested": requested, "kernel": kernel}
        if kernel is None:
            entry.update(ran=False, fallback_reason=reason or "no kernel")
            variants.append(entry)
            continue
        with torch.no_grad():
            entry.update(ran=True, **_diff(call(), ref))
            timing = time_calls(call, device=ctx.device, warmup=config.warmup, iters=config.iters)
            peak = measure_peak_memory(call, device=ctx.device)
        entry.update(latency_ms=timing.summary(), peak_memory_bytes=peak.peak_bytes, peak_memory_source=peak.source)
        ctx.samples.write({"variant": label, "kernel": kernel, "clock": timing.clock,
                           "samples_ms": list(timing.samples_ms)})
        variants.append(entry)
    return _outcome(config, ctx, dtype_name, variants)


def _outcome(config: AttentionConfig, ctx: RunContext, dtype_name: str, variants: list[dict]) -> Outcome:
    ran = [v for v in variants if v["ran"]]
    tol = TOLERANCE[dtype_name]
    worst = max(ran, key=lambda v: v["max_abs_diff"])
    agree = all(v["finite"] and v["max_abs_diff"] <= tol for v in ran)
    fell_back = [v for v in variants if not v["ran"]]
    failure = None
    if not agree:
        failure = Failure(stage="run", kind="correctness",
                          message=f"{worst['variant']} differs from the float64 reference by "
                                  f"{worst['max_abs_diff']:.3g} (> {tol})")
    peak = max(ran, key=lambda v: v["peak_memory_bytes"])
    performance = Performance.not_applicable(
        "attention micro-benchmark: per-variant latency is in details.variants[].latency_ms",
        peak_memory_bytes=peak["peak_memory_bytes"], peak_memory_source=peak["peak_memory_source"],
    )
    correctness = Correctness(
        output_count=len(ran), termination_counts={},
        quality={"metric": "max_abs_diff_vs_float64", "value": worst["max_abs_diff"], "threshold": tol,
                 "passed": agree, "reference": "explicit attention in float64"},
    )
    fastest = min(ran, key=lambda v: v["latency_ms"]["p50"])
    conclusion = Conclusion(
        evidence_level="single", decision="blocked" if failure else "inconclusive", failure=failure,
        next_step="repeat on the target GPU (benchmarks/gpu_check.sh) and compare kernels there"
        if ctx.device == "cpu" else "repeat with the serving shapes and pair the fastest kernel against explicit",
        summary=f"fastest: {fastest['variant']} ({fastest['kernel']}) p50 {fastest['latency_ms']['p50']:.3f} ms; "
        f"{len(fell_back)} requested backend(s) unavailable",
    )
    lines = [f"{'variant':<16}{'kernel':<11}{'p50_ms':>10}{'p95_ms':>10}{'max_abs':>11}{'peak_MiB':>10}"]
    for v in variants:
        if v["ran"]:
            lines.append(f"{v['variant']:<16}{v['kernel']:<11}{v['latency_ms']['p50']:>10.3f}{v['latency_ms']['p95']:>10.3f}"
                         f"{v['max_abs_diff']:>11.2e}{v['peak_memory_bytes'] / 2**20:>10.2f}")
        else:
            lines.append(f"{v['variant']:<16}fell back: {v['fallback_reason'][:90]}")
    shape = {"batch": config.batch, "heads": config.heads, "seq_len": config.seq_len, "head_dim": config.head_dim}
    return Outcome(
        run_label=f"attention/{dtype_name}/s{config.seq_len}",
        workload=mechanism_workload(config.seed, "a kernel micro-benchmark has no request concurrency"),
        performance=performance, correctness=correctness, conclusion=conclusion,
        details={"shape": shape, "dtype": dtype_name, "causal": config.causal, "tolerance_abs": tol,
                 "variants": variants},
        summary_lines=tuple(lines), effective={"dtype": dtype_name, **shape},
    )


EXPERIMENT = Experiment(
    name="attention", semantic_id="INF-EXECUTION-DISPATCH",
    help="explicit attention vs SDPA per backend: agreement, latency, peak memory, kernel path and fallback",
    config=AttentionConfig, run=run,
)
