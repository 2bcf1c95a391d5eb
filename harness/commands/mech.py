"""infkit mech NAME [options]: run one CPU mechanism, write its run under runs/mech/NAME/RUN_ID/ and sign it."""

from __future__ import annotations

import argparse

from harness.commands._runargs import add_run_arguments, print_finished
from harness.knobs import add_config_arguments, add_protocol_argument, config_from_args
from harness.mech import get_mechanism, mechanisms
from harness.mech.output import RESULT_FILE, write_mech_run
from harness.rundir.directory import check_run_target


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mech", help="run a CPU mechanism (simulated; no server or GPU needed)",
                       description="Run one mechanism and write result.json, run.json, summary.txt "
                                   "and plots under OUT/NAME/RUN_ID/, then sign it into manifests/.")
    names = p.add_subparsers(dest="mechanism", metavar="NAME")
    for mech in mechanisms().values():
        q = names.add_parser(mech.name, help=mech.help, description=mech.help)
        add_config_arguments(q, mech.config)
        add_run_arguments(q, default_out="runs/mech")
        add_protocol_argument(q, "--run-id", default=None, help="run folder name (default: timestamp + random suffix)")
        add_protocol_argument(q, "--quiet", action="store_true", help="print only where the run and its manifest are")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.mechanism:
        print("infkit mech: choose a mechanism: " + ", ".join(mechanisms()))
        return 2
    mech = get_mechanism(args.mechanism)
    config = config_from_args(mech.config, args, make_overrides=args.make_vars)
    check_run_target(args.out / mech.name, args.run_id, sign=args.sign)
    output = mech.run(config)
    done = write_mech_run(args.out, mech.name, output, run_id=args.run_id, sign=args.sign)
    if not args.quiet:
        print(done.summary.rstrip())
        print()
    print_finished(done, done.path / RESULT_FILE)
    return 0
