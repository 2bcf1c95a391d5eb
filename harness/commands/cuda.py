"""infkit cuda NAME: run one CUDA mechanism experiment (GPU when present, recorded CPU fallback)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cuda.registry import config_fields, experiments, get_experiment, parse_field
from harness.cuda.runner import DEFAULT_OUT_ROOT, run_experiment


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cuda", help="CUDA mechanism experiments (attention, dispatch, budget, proposal, overlap)",
        description="Each experiment writes runs/cuda/NAME/RUN_ID/{result.json,run.json,samples.jsonl,summary.txt}. "
        "Without a GPU it runs on CPU and records the fallback.",
    )
    names = p.add_subparsers(dest="experiment", metavar="NAME", required=True)
    for name, exp in experiments().items():
        ep = names.add_parser(name, help=exp.summary, description=exp.summary)
        ep.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where to run (auto: cuda when torch sees a GPU)")
        ep.add_argument("--out", type=Path, default=DEFAULT_OUT_ROOT, help="root of the run directories")
        for f, _type in config_fields(exp.config_cls):
            default = f.default
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            ep.add_argument(f"--{f.name.replace('_', '-')}", dest=f"cfg_{f.name}", metavar=f.name.upper(),
                            default=None, help=f"{f.metadata.get('help', '')} (default: {shown})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    exp = get_experiment(args.experiment)
    given = {f.name: parse_field(getattr(args, f"cfg_{f.name}"), type_, f.name)
             for f, type_ in config_fields(exp.config_cls) if getattr(args, f"cfg_{f.name}") is not None}
    config = exp.config_cls(**given)
    out = run_experiment(exp, config, device=args.device, out_root=args.out)
    print((out.run_dir / "summary.txt").read_text(), end="")
    print(f"result: {out.run_dir / 'result.json'}")
    failure = out.result["conclusion"]["failure"]
    # The run is recorded either way; a wrong answer must still fail the command (and CI).
    return 1 if failure and failure["kind"] == "correctness" else 0
