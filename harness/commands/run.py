"""infkit run: replay a workload against an OpenAI-compatible endpoint and write the result."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import psutil

from harness.errors import InvalidInput
from harness.models import PreparedModel
from harness.models.resolve import identify_served
from harness.progress import reporter
from harness.runtime.gpus import parse_gpus
from harness.serving.measure import MeasureConfig, measure
from harness.serving.metrics import SLO_KEYS
from harness.serving.summary import render_summary
from harness.serving.validity import ValidityLimits
from harness.telemetry import rss_probe
from harness.telemetry.cputime import cpu_probe

EXIT_INVALID = 4  # the run finished and its result is written, but it is INVALID or failed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="measure a server with a workload (requests.jsonl + result.json)",
                       description="Exit 0 when the run is VALID, 4 when it finished INVALID or failed "
                       "(result.json says why), 1 on bad input.")
    p.add_argument("--endpoint", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="the served model's name at the endpoint; a checkpoint directory "
                   "or an org/name id in the local Hugging Face cache (what vLLM serves as --model) also names the "
                   "result's model and tokenizer by their digests and counts tokens with its tokenizer")
    p.add_argument("--workload", required=True, help="workload file from `infkit workload make`")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--api", choices=("completions", "chat"), default="completions")
    p.add_argument("--max-concurrency", type=int, help="closed loop: concurrency (default: the workload's); "
                   "timed schedule: cap on in-flight requests")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds (default: 600)")
    p.add_argument("--semantic-id", default="INF-FLOAT-BASELINE")
    p.add_argument("--run-label", default="serving")
    p.add_argument("--run-id", help="default: a new sortable id")
    p.add_argument("--profile-id", default="INF-VLLM-CPU")
    p.add_argument("--backend-name", default="vllm-cpu")
    p.add_argument("--backend-version", default="unknown")
    p.add_argument("--metrics-url", help="Prometheus endpoint (default: <endpoint>/metrics)")
    p.add_argument("--server-pid", type=int, help="sample the peak RSS and the CPU time of this process tree")
    p.add_argument("--gpu", help="the server's GPUs (indexes such as 0 or 0,1): NVML device memory, power, energy, "
                   "clocks and clock events are sampled on them during the run")
    p.add_argument("--usd-per-gpu-hour", type=float, help="price of one GPU-hour in USD: the result gains the cost "
                   "per million output tokens")
    p.add_argument("--ignore-eos", action="store_true", help="ask for exactly the workload's output lengths")
    p.add_argument("--min-tokens", action="store_true", help="also send min_tokens = output length")
    p.add_argument("--no-stream", dest="stream", action="store_false",
                   help="ask for whole answers: E2E and throughput only, TTFT/TPOT/ITL null with the reason")
    p.add_argument("--tokenizer", help="directory with tokenizer.json: counts each chunk's tokens for per-token ITL "
                   "when the server sends no per-chunk usage")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help=f"goodput SLO, repeatable; KEY in {', '.join(SLO_KEYS)}")
    p.add_argument("--client-workers", type=int, help="client processes (default: one per 1024 streams)")
    p.add_argument("--reference", help="reference outputs (a previous requests.jsonl) for greedy agreement")
    p.add_argument("--max-send-lag-ms", type=float, default=ValidityLimits.send_lag_p99_ms,
                   help="validity: client send-lag P99 floor (the limit is 5 %% of TTFT P50 and the mean gap)")
    p.add_argument("--max-loop-lag-ms", type=float, default=ValidityLimits.loop_lag_p99_ms,
                   help="validity: client event-loop lag P99 floor (relative limit as for send lag)")
    p.set_defaults(func=run)


def _slo(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in SLO_KEYS or not value:
            raise InvalidInput(f"--slo {item!r}: use KEY=MS with KEY in {', '.join(SLO_KEYS)}")
        try:
            out[key] = float(value)
        except ValueError:
            raise InvalidInput(f"--slo {item!r}: {value!r} is not a number") from None
    return out


def served_checkpoint(name: str, workload: str) -> PreparedModel | None:
    """The checkpoint ``--model`` names where this machine holds it, after checking the workload was made with its
    tokenizer (else the token counts the result reports would not be this model's)."""
    model = identify_served(name)
    if model is None:
        return None
    try:
        with Path(workload).open(encoding="utf-8") as fh:
            header = json.loads(fh.readline())
        made_with = header["tokenizer"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return model  # measure reports what is wrong with the file
    if made_with != model.tokenizer_sha256:
        raise InvalidInput(f"--workload {workload} was made with another tokenizer ({made_with}) than {name}'s own "
                           f"({model.tokenizer_sha256})", hint=f"make it with --tokenizer {model.path}")
    return model


def run(args: argparse.Namespace) -> int:
    for flag, limit in (("--max-send-lag-ms", args.max_send_lag_ms), ("--max-loop-lag-ms", args.max_loop_lag_ms)):
        if not limit >= 0:  # NaN fails too
            raise InvalidInput(f"{flag} {limit}: must be a finite number of milliseconds >= 0")
    if args.server_pid is not None and (args.server_pid <= 0 or not psutil.pid_exists(args.server_pid)):
        raise InvalidInput(
            f"--server-pid {args.server_pid}: no such process",
            hint="the server's process id, to sample its peak memory",
        )
    model = served_checkpoint(args.model, args.workload)
    cfg = MeasureConfig(
        endpoint=args.endpoint,
        model=args.model,
        model_ref=model.model_ref if model else None,
        tokenizer_ref=model.tokenizer_ref if model else None,
        workload_path=Path(args.workload),
        out_dir=args.out,
        api=args.api,
        max_concurrency=args.max_concurrency,
        timeout_s=args.timeout,
        semantic_id=args.semantic_id,
        run_label=args.run_label,
        run_id=args.run_id,
        profile_id=args.profile_id,
        backend_name=args.backend_name,
        backend_version=args.backend_version,
        metrics_url=args.metrics_url,
        ignore_eos=args.ignore_eos,
        min_tokens=args.min_tokens,
        stream=args.stream,
        tokenizer_path=args.tokenizer or (model.path if model else None),
        slo=_slo(args.slo),
        client_workers=args.client_workers,
        memory_probe=rss_probe(args.server_pid) if args.server_pid else None,
        gpu_devices=parse_gpus(args.gpu),
        usd_per_gpu_hour=args.usd_per_gpu_hour,
        cpu_probe=cpu_probe(args.server_pid) if args.server_pid else None,
        reference_path=args.reference,
        validity=ValidityLimits(send_lag_p99_ms=args.max_send_lag_ms, loop_lag_p99_ms=args.max_loop_lag_ms),
        reporter=reporter("infkit run", out=sys.stderr),
    )
    outcome = measure(cfg)
    print(render_summary(outcome.result), end="")
    print(f"wrote {outcome.result_path}")
    concl = outcome.result["conclusion"]
    return 0 if concl["valid"] and not concl["failure"] else EXIT_INVALID
