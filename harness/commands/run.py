"""infkit run: replay a workload against an OpenAI-compatible endpoint and write the result."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import psutil

from harness.errors import InvalidInput
from harness.knobs import add_config_arguments, config_from_args
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
    add_config_arguments(p, MeasureConfig)  # the measurement's own options: defaults in MeasureConfig only
    # what the command turns into MeasureConfig's probes, devices, SLOs and validity limits
    p.add_argument("--server-pid", type=int, help="sample the peak RSS and the CPU time of this process tree")
    p.add_argument("--gpu", help="the server's GPUs (indexes such as 0 or 0,1): NVML device memory, power, energy, "
                   "clocks and clock events are sampled on them during the run")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help=f"goodput SLO, repeatable; KEY in {', '.join(SLO_KEYS)}")
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
    cfg = config_from_args(MeasureConfig, args)  # its values are checked by measure, before the first request
    model = served_checkpoint(cfg.model, str(cfg.workload_path))
    cfg = dataclasses.replace(
        cfg,
        workload_path=Path(cfg.workload_path),
        model_ref=model.model_ref if model else None,
        tokenizer_ref=model.tokenizer_ref if model else None,
        tokenizer_path=cfg.tokenizer_path or (model.path if model else None),
        slo=_slo(args.slo),
        memory_probe=rss_probe(args.server_pid) if args.server_pid else None,
        gpu_devices=parse_gpus(args.gpu),
        cpu_probe=cpu_probe(args.server_pid) if args.server_pid else None,
        validity=ValidityLimits(send_lag_p99_ms=args.max_send_lag_ms, loop_lag_p99_ms=args.max_loop_lag_ms),
        reporter=reporter("infkit run", out=sys.stderr),
    )
    outcome = measure(cfg)
    print(render_summary(outcome.result), end="")
    print(f"wrote {outcome.result_path}")
    concl = outcome.result["conclusion"]
    return 0 if concl["valid"] and not concl["failure"] else EXIT_INVALID
