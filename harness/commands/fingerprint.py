"""infkit fingerprint: this machine's environment as a schema-valid document."""

from __future__ import annotations

import argparse
import json

from tabulate import tabulate

from harness.contract.atomic import atomic_write_json
from harness.contract.paths import check_output_file
from harness.contract.schemas import validate_document
from harness.errors import SchemaViolation
from harness.rundir import fingerprint


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fingerprint", help="print the host/GPU/package/git fingerprint")
    p.add_argument("--json", action="store_true", help="print the JSON document")
    p.add_argument("-o", "--out", help="also write the document to this file (atomically)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out:
        check_output_file(args.out, "-o/--out")
    doc = fingerprint.collect()
    problems = validate_document(doc)
    if problems:
        raise SchemaViolation("fingerprint does not match its schema: " + "; ".join(map(str, problems)))
    if args.out:
        atomic_write_json(args.out, doc)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    host = doc["host"]
    rows = [
        ("os", host["os"]),
        ("kernel", host["kernel"]),
        ("cpu", f"{host['cpu_model']} ({host['cpu_cores_logical']} cores)"),
        ("cpu isa", " ".join(host.get("cpu_isa") or []) or "not reported"),
        ("memory", f"{host['memory_total_bytes'] / 2**30:.1f} GiB"),
        ("python", doc["python"]["version"]),
        ("torch", (doc["torch"] or {}).get("version", "not installed")),
        ("gpus", ", ".join(g["name"] for g in doc["gpus"]) or f"none ({doc['gpus_absent_reason']})"),
        ("harness", f"{doc['harness']['git_commit'] or 'no git'}{' (dirty)' if doc['harness']['git_dirty'] else ''}"),
    ]
    print(tabulate(rows, tablefmt="plain"))
    return 0
