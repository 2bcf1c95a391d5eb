"""infkit cuda NAME: run one CUDA mechanism experiment (GPU when present, recorded CPU fallback) and sign it."""

from __future__ import annotations

import argparse

from harness.commands._runargs import add_run_arguments, print_finished
from harness.cuda.registry import experiments, get_experiment
from harness.cuda.runner import DEFAULT_OUT_ROOT, RESULT_FILE, run_experiment
from harness.knobs import add_config_arguments, add_protocol_argument, config_from_args
from harness.rundir.directory import check_run_target


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cuda", help="CUDA mechanism experiments (attention, dispatch, budget, proposal, overlap)",
        description="Each experiment writes runs/cuda/NAME/RUN_ID/{result.json,run.json,samples.jsonl,summary.txt} "
        "and signs it into manifests/. Without a GPU it runs on CPU and records the fallback.",
    )
    names = p.add_subparsers(dest="experiment", metavar="NAME", required=True)
    for name, exp in experiments().items():
        ep = names.add_parser(name, help=exp.help, description=exp.help)
        add_config_arguments(ep, exp.config)
        add_protocol_argument(ep, "--device", default="auto", choices=("auto", "cpu", "cuda"),
                              help="where to run (auto: cuda when torch sees a GPU)")
        add_run_arguments(ep, default_out=str(DEFAULT_OUT_ROOT))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    exp = get_experiment(args.experiment)
    config = config_from_args(exp.config, args, make_overrides=args.make_vars)
    check_run_target(args.out / exp.name, None, sign=args.sign)
    out = run_experiment(exp, config, device=args.device, out_root=args.out, sign=args.sign)
    print(out.finished.summary, end="")
    print_finished(out.finished, out.run_dir / RESULT_FILE)
    failure = out.result["conclusion"]["failure"]
    # The run is recorded either way; a wrong answer must still fail the command (and CI).
    return 1 if failure and failure["kind"] == "correctness" else 0
