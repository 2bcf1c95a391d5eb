"""infkit validate FILE...: check results, workloads, fingerprints (and any other infkit document)."""

from __future__ import annotations

import argparse
import sys

import harness.workload  # noqa: F401 - registers the workload file check (id, count, order), as load_workload runs it
from harness.contract.schemas import validate_file
from harness.errors import InfkitError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="validate infkit documents against their schemas and the evidence rules",
        description="Each document names its schema with its own top-level \"schema\" marker. A workload file "
        "is also checked as `workload show` checks it (request count, order, schedule, workload_id). "
        "Exit 0 when every file is valid, 1 otherwise.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    failed = 0
    for name in args.files:
        try:
            problems = validate_file(name)
        except InfkitError as exc:
            print(f"{name}: INVALID: {exc}", file=sys.stderr)
            failed += 1
            continue
        if problems:
            failed += 1
            for problem in problems:
                print(f"{name}: INVALID: {problem}", file=sys.stderr)
        elif not args.quiet:
            print(f"{name}: valid")
    return 1 if failed else 0
