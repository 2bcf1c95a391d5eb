"""infkit workload make KIND ... -o FILE / infkit workload show FILE."""

from __future__ import annotations

import argparse
from pathlib import Path

from tabulate import tabulate

from harness.contract.paths import check_output_file
from harness.errors import InvalidInput
from harness.workload import (
    GENERATORS,
    PROCESSES,
    Arrival,
    Common,
    check_options,
    load_workload,
    make_workload,
    write_workload,
)

DEFAULT_MODEL = "smollm2-135m"
TRACE_KINDS = ("trace", "trace-unique")  # generators that replay a trace file: its own timestamps by default


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workload", help="make or inspect a content-hashed workload file")
    wsub = p.add_subparsers(dest="workload_command", metavar="ACTION", required=True)
    make = wsub.add_parser("make", help="generate a workload file (same flags => byte-identical file)")
    kinds = make.add_subparsers(dest="kind", metavar="KIND", required=True)
    for gen in GENERATORS.values():
        kp = kinds.add_parser(gen.kind, help=gen.help, description=gen.help)
        _common_flags(kp)
        for opt in gen.options:
            kp.add_argument(f"--{opt.name.replace('_', '-')}", type=opt.type, default=opt.default,
                            help=f"{opt.help} (default: {opt.default})")
        kp.set_defaults(func=run_make, options=[o.name for o in gen.options])
    show = wsub.add_parser("show", help="validate a workload file, re-check its id and summarize it")
    show.add_argument("file")
    show.add_argument("--requests", type=int, default=5, help="how many requests to list (default: 5)")
    show.set_defaults(func=run_show)


def _common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", required=True, help="workload file to write (.jsonl)")
    p.add_argument("--tokenizer", help=f"directory with tokenizer.json (default: the prepared {DEFAULT_MODEL} model)")
    p.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--input-tokens", type=int, default=256, help="input length in tokens (mean when ranged)")
    p.add_argument("--output-tokens", type=int, default=64, help="output length in tokens (mean when ranged)")
    p.add_argument("--input-range", type=float, default=0.0, help="input lengths uniform in [N(1-r), N(1+r)]")
    p.add_argument("--output-range", type=float, default=0.0, help="output lengths uniform in [N(1-r), N(1+r)]")
    p.add_argument("--arrival", choices=PROCESSES, default=None,
                   help="arrival process (default: a trace's own timestamps for trace kinds, else closed)")
    p.add_argument("--concurrency", type=int, help="closed loop: concurrent requests")
    p.add_argument("--rate", type=float, help="poisson/gamma/constant: mean requests per second")
    p.add_argument("--burstiness", type=float, help="gamma shape: 1 = Poisson, <1 burstier, >1 smoother")
    p.add_argument("--high-priority-fraction", type=float, default=0.0,
                   help="priority mix: this fraction of requests gets priority 0 (high), the rest 1 (default: none)")
    p.add_argument("--seed", type=int, default=0, help="base seed: lengths=S, content=S+1, arrival=S+2, priority=S+3")
    for dim in ("lengths", "content", "arrival"):
        p.add_argument(f"--{dim}-seed", type=int, help=f"override the {dim} seed")


def _tokenizer_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    try:
        from harness.models import ensure_model  # type: ignore[import-not-found]
    except ImportError:
        raise InvalidInput(
            "no --tokenizer given and model preparation is not available", hint="pass --tokenizer DIR"
        ) from None
    return Path(ensure_model(DEFAULT_MODEL).path)


def run_make(args: argparse.Namespace) -> int:
    seeds = {
        d: getattr(args, f"{d}_seed")
        for d in ("lengths", "content", "arrival")
        if getattr(args, f"{d}_seed") is not None
    }
    process = args.arrival or ("trace" if args.kind in TRACE_KINDS else "closed")
    common = Common(
        arrival=Arrival(process, rate_rps=args.rate, burstiness=args.burstiness, concurrency=args.concurrency),
        seed=args.seed,
        requests=args.requests,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        input_range=args.input_range,
        output_range=args.output_range,
        seeds=seeds,
        high_priority_fraction=args.high_priority_fraction,
    )
    options = {name: getattr(args, name) for name in args.options}
    # Every flag and the output path are checked before the tokenizer (or the model) is prepared.
    check_options(args.kind, common, options)
    check_output_file(args.out, "-o/--out")
    workload = make_workload(args.kind, common, options, _tokenizer_dir(args.tokenizer))
    path = write_workload(args.out, workload)
    print(f"{path}: {workload.kind}, {len(workload.requests)} requests, {workload.workload_id}")
    return 0


def _traffic_rows(w) -> list[tuple[str, object]]:
    """Arrival rate of a timed schedule, and a trace's sharing structure when it has one."""
    rows: list[tuple[str, object]] = []
    offsets = [r.offset_s for r in w.requests if r.offset_s is not None]
    if len(offsets) > 1 and offsets[-1] > offsets[0]:
        rows.append(
            (
                "arrival rate",
                f"{(len(offsets) - 1) / (offsets[-1] - offsets[0]):.4g} requests/s over "
                f"{offsets[-1] - offsets[0]:.4g} s",
            )
        )
    sharing = w.header.get("sharing")
    if sharing:
        rows += [
            ("distinct blocks", f"{sharing['distinct_blocks']} of {sharing['block_tokens']} tokens"),
            (
                "reuse ceiling",
                f"{sharing['reuse_ceiling']:.4f} ({sharing['reusable_tokens']} of "
                f"{sharing['prompt_tokens']} prompt tokens a perfect prefix cache could reuse)",
            ),
        ]
    if w.header.get("trace_rows_skipped"):
        rows.append(("trace rows skipped", w.header["trace_rows_skipped"]))
    if w.header.get("sessions"):
        rows += [(f"sessions: {k.replace('_', ' ')}", v) for k, v in w.header["sessions"].items()]
    return rows


def run_show(args: argparse.Namespace) -> int:
    w = load_workload(args.file)
    h = w.header
    tc = h["token_counts"]
    rows = [
        ("workload_id", w.workload_id),
        ("kind", w.kind),
        ("requests", h["request_count"]),
        ("arrival", ", ".join(f"{k}={v}" for k, v in h["arrival"].items())),
        ("input tokens", "min {min} / mean {mean} / max {max} (total {total})".format(**tc["input"])),
        ("output tokens", "min {min} / mean {mean} / max {max} (total {total})".format(**tc["output"])),
        ("seeds", ", ".join(f"{k}={v}" for k, v in h["seeds"].items())),
        ("tokenizer", f"{h['tokenizer']['name']} {h['tokenizer']['sha256']}"),
        ("paired with", h.get("paired_with") or "-"),
        *_traffic_rows(w),
    ]
    print(tabulate(rows, tablefmt="plain"))
    listed = [
        (r.index, r.offset_s, r.input_tokens, r.output_tokens, r.group, r.prefix_tokens)
        for r in w.requests[: max(0, args.requests)]
    ]
    if listed:
        print()
        print(tabulate(listed, headers=["index", "offset_s", "input", "output", "group", "prefix"], missingval="-"))
    return 0
