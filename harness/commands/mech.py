"""infkit mech NAME [options]: run one CPU mechanism and write its result under runs/mech/NAME/RUN_ID/."""

from __future__ import annotations

import argparse

from harness.mech import MECHANISMS, get_mechanism
from harness.mech.cliargs import add_config_arguments, config_from_args
from harness.mech.output import write_mech_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mech", help="run a CPU mechanism (simulated; no server or GPU needed)",
                       description="Run one mechanism and write result.json, run.json, summary.txt "
                                   "and plots under OUT/NAME/RUN_ID/.")
    names = p.add_subparsers(dest="mechanism", metavar="NAME")
    for mech in MECHANISMS.values():
        q = names.add_parser(mech.name, help=mech.help, description=mech.help)
        add_config_arguments(q, mech.config_class())
        q.add_argument("--out", default="runs/mech", help="output root (default: runs/mech)")
        q.add_argument("--run-id", default=None, help="run folder name (default: timestamp + random suffix)")
        q.add_argument("--quiet", action="store_true", help="print only the run folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.mechanism:
        print("infkit mech: choose a mechanism: " + ", ".join(MECHANISMS))
        return 2
    mech = get_mechanism(args.mechanism)
    config = config_from_args(mech.config_class(), args)
    output = mech.run(config)
    run_dir = write_mech_run(args.out, mech.name, output, run_id=args.run_id)
    if not args.quiet:
        print((run_dir / "summary.txt").read_text().rstrip())
        print()
    print(f"result: {run_dir / 'result.json'}")
    return 0
