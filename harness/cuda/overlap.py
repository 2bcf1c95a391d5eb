"""Execution overlap: host-to-device copies serial with compute vs overlapped on a second CUDA stream.

``chunks`` pinned host tensors are copied to the GPU and each is multiplied by
a resident weight. Serial: copy chunk i, then compute it, on one stream.
Overlapped: a copy stream prefetches chunk i+1 while the compute stream works
on chunk i; events order each compute after its copy. Also timed alone: all
copies (transfer time) and all computes (compute time). Exposed transfer =
each overlapped sample - the median compute-alone time: the copy time the
overlap failed to hide.
Outputs of both schedules must be bitwise equal. CPU has no streams to
overlap a host-to-device copy with, so on CPU the result is a precheck with a
``capability_missing`` failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Failure, Performance
from harness.contract.distribution import distribution_ms
from harness.cuda.device import import_torch, time_calls
from harness.cuda.registry import CommonConfig, Experiment
from harness.cuda.runner import Outcome, RunContext, mechanism_workload
from harness.knobs import knob


@dataclass(frozen=True)
class OverlapConfig(CommonConfig):
    chunks: int = knob(8, "host chunks per pass", min=1)
    rows: int = knob(8192, "rows per chunk", min=1)
    hidden: int = knob(4096, "columns per chunk and size of the square weight", min=1)
    dtype: str = knob("bfloat16", "tensors' dtype", choices=("float32", "float16", "bfloat16"))
    compute_repeats: int = knob(1, "matmuls per chunk (scales compute vs transfer)", min=1)


def _precheck_outcome(config: OverlapConfig, ctx: RunContext) -> Outcome:
    torch = import_torch()
    reason = (f"torch {torch.__version__} sees no CUDA device (CUDA build: {torch.version.cuda}); "
              "host-to-device copies cannot be overlapped with compute on CPU")
    return Outcome(
        run_label="overlap/streams",
        workload=mechanism_workload(config.seed, "no transfer ran"),
        performance=Performance.not_applicable("not measured: no CUDA device"),
        correctness=Correctness(output_count=0, termination_counts={}, quality=None,
                                null_reasons={"quality": "no outputs: the experiment needs a CUDA device"}),
        conclusion=Conclusion(
            evidence_level="precheck", decision="blocked",
            failure=Failure(stage="precheck", kind="capability_missing", message=reason, recovered=False),
            next_step="run `infkit cuda overlap --device cuda` on a GPU machine (benchmarks/gpu_check.sh)",
            summary="CUDA streams unavailable: overlap not measured"),
        details={"capability": {"cuda_available": False, "reason": reason}},
        summary_lines=(f"precheck: {reason}",),
        effective={"measured": False},
    )


def run(config: OverlapConfig, ctx: RunContext) -> Outcome:
    if ctx.device != "cuda":
        return _precheck_outcome(config, ctx)
    torch = import_torch()
    dtype = getattr(torch, config.dtype)
    gen = torch.Generator(device="cpu").manual_seed(config.seed)
    host = [torch.randn(config.rows, config.hidden, generator=gen).to(dtype).pin_memory() for _ in range(config.chunks)]
    weight = (torch.randn(config.hidden, config.hidden, generator=gen) / config.hidden ** 0.5).to("cuda", dtype)
    dev = [torch.empty_like(h, device="cuda") for h in host]
    outs = {name: [torch.empty(config.rows, config.hidden, device="cuda", dtype=dtype) for _ in host]
            for name in ("serial", "overlapped")}
    compute_stream, copy_stream = torch.cuda.current_stream(), torch.cuda.Stream()

    def compute(i: int, out) -> None:
        y = dev[i]
        for _ in range(config.compute_repeats):
            y = y @ weight
        out[i].copy_(y)

    def serial() -> None:
        for i in range(config.chunks):
            dev[i].copy_(host[i], non_blocking=True)
            compute(i, outs["serial"])

    def overlapped() -> None:
        copied = [torch.cuda.Event() for _ in host]
        copy_stream.wait_stream(compute_stream)  # previous pass done with dev[] before overwriting it
        with torch.cuda.stream(copy_stream):
            for i in range(config.chunks):
                dev[i].copy_(host[i], non_blocking=True)
                copied[i].record(copy_stream)
        for i in range(config.chunks):
            compute_stream.wait_event(copied[i])
            compute(i, outs["overlapped"])

    def transfer_only() -> None:
        for i in range(config.chunks):
            dev[i].copy_(host[i], non_blocking=True)

    def compute_only() -> None:
        for i in range(config.chunks):
            compute(i, outs["serial"])

    series = {}
    for name, fn in (("serial", serial), ("overlapped", overlapped), ("transfer_only", transfer_only),
                     ("compute_only", compute_only)):
        timing = time_calls(fn, device="cuda", warmup=config.warmup, iters=config.iters)
        series[name] = timing
        ctx.samples.write({"series": name, "clock": timing.clock, "samples_ms": list(timing.samples_ms)})
    serial(), overlapped()
    torch.cuda.synchronize()
    identical = all(torch.equal(a, b) for a, b in zip(outs["serial"], outs["overlapped"], strict=True))
    return _outcome(config, ctx, series, identical, sum(h.numel() * h.element_size() for h in host))


def _outcome(config: OverlapConfig, ctx: RunContext, series: dict, identical: bool, bytes_per_pass: int) -> Outcome:
    p50 = {k: t.summary()["p50"] for k, t in series.items()}
    exposed = [max(0.0, o - p50["compute_only"]) for o in series["overlapped"].samples_ms]
    figures: dict[str, Any] = {
        "series": {k: t.summary() for k, t in series.items()},
        "exposed_transfer_ms": distribution_ms(exposed),
        "exposed_transfer_serial_ms": max(0.0, p50["serial"] - p50["compute_only"]),
        "hidden_fraction": 1 - max(0.0, p50["overlapped"] - p50["compute_only"]) / p50["transfer_only"],
        "speedup_overlapped_vs_serial": p50["serial"] / p50["overlapped"],
        "h2d_bandwidth_gb_per_s": bytes_per_pass / (p50["transfer_only"] / 1e3) / 1e9,
        "bytes_per_pass": bytes_per_pass,
        "outputs_identical": identical,
    }
    failure = None if identical else Failure(stage="run", kind="correctness",
                                             message="overlapped outputs differ from serial outputs")
    lines = [f"{k:<14} p50 {t.summary()['p50']:.3f} ms  p95 {t.summary()['p95']:.3f} ms" for k, t in series.items()]
    lines.append(
        f"exposed transfer p50 {figures['exposed_transfer_ms']['p50']:.3f} ms; hidden "
        f"{figures['hidden_fraction']:.0%}; "
        f"speedup {figures['speedup_overlapped_vs_serial']:.2f}x; outputs identical: {identical}"
    )
    return Outcome(
        run_label=f"overlap/streams/{config.dtype}",
        workload=mechanism_workload(config.seed, "a fixed sequence of chunks per pass"),
        performance=Performance.not_applicable("stream micro-benchmark: per-series latency is in details.series"),
        correctness=Correctness(
            output_count=config.chunks,
            termination_counts={},
            quality={
                "metric": "bitwise_equal_serial_vs_overlapped",
                "value": identical,
                "passed": identical,
                "reference": "serial schedule on one stream",
            },
        ),
        conclusion=Conclusion(
            evidence_level="single",
            decision="blocked" if failure else "inconclusive",
            failure=failure,
            next_step="pair serial vs overlapped over repeated runs at serving chunk sizes",
            summary=f"overlap hides {figures['hidden_fraction']:.0%} of the transfer",
        ),
        details=figures,
        summary_lines=tuple(lines),
        effective={"measured": True, "dtype": config.dtype},
    )


EXPERIMENT = Experiment(
    name="overlap",
    semantic_id="INF-SERVING-OVERLAP",
    help="serial vs CUDA-stream overlapped host-to-device copies with compute: correctness, transfer, exposed time",
    config=OverlapConfig,
    run=run,
)
