"""infkit report RUN_OR_MANIFEST... -o DIR: one verified page across runs and machines, or their BR0.2.1 export."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.report.br_export import export_br
from harness.report.build import ReportConfig, build_report

FORMATS = ("page", "br0.2.1")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="audit runs and write one static page comparing them (index.html, report.json, report.md)",
        description="Audit every input first (as `infkit audit`: signature, subject digests, schemas, evidence "
        "rules); an input that fails is shown INVALID with its reasons and contributes no figure. Then, per "
        "bench, one table of the runs' headline figures and conclusions, like-for-like flags (same workloads, "
        "model, backend), what changed between consecutive runs (packages, images, driver/CUDA, GPU, CPU, "
        "harness commit, requested vs effective settings) next to the change in their results, and the runs' "
        "own figures embedded. An INPUT is a run directory, a manifest, or a folder of manifests.",
    )
    p.add_argument("inputs", nargs="+", metavar="RUN_OR_MANIFEST")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="output folder (created; an earlier report folder is replaced, a folder holding anything "
                   "it did not write is refused)")
    p.add_argument("--root", default=".", help="directory run and subject paths are relative to (default: .)")
    p.add_argument("--trusted-key", action="extend", nargs="+", default=[], metavar="PEM",
                   help="public key(s) to trust instead of every ROOT/manifests/keys/*.pub.pem")
    p.add_argument("--trust", metavar="FILE", help="trust policy naming the key ids allowed to sign (as infkit audit)")
    p.add_argument("--no-charts", action="store_true", help="leave out the cross-run charts (no matplotlib needed)")
    p.add_argument("--excerpt", action="store_true", help="ROOT holds published excerpts of runs (infkit excerpt): "
                   "their absent subjects are held back, as infkit audit --excerpt reads them")
    p.add_argument("--format", choices=FORMATS, default="page",
                   help="page: index.html, report.json and report.md (default); br0.2.1: one Benchmark Report "
                   "v0.2.1 document per serving result of every VALID run (llm-d-benchmark's schema, measured "
                   "fields only), at DIR/<run_id>/<result path>.br0.2.1.json")
    p.set_defaults(func=run)


def _run_br(inputs: list[str], config: ReportConfig) -> int:
    out = export_br(inputs, config)
    print(f"report: {out.out_dir}: {len(out.written)} BR0.2.1 document{'s' if len(out.written) != 1 else ''} from "
          f"{len(out.exported)} run{'s' if len(out.exported) != 1 else ''}")
    for name in out.written:
        print(f"        {out.out_dir / name}")
    for line in out.skipped:
        print(f"        skipped: {line}")
    return 0


def run(args: argparse.Namespace) -> int:
    config = ReportConfig(out_dir=Path(args.out), root=Path(args.root),
                          trusted_keys=tuple(map(Path, args.trusted_key)), charts=not args.no_charts,
                          trust_policy=Path(args.trust) if args.trust else None, excerpt=args.excerpt)
    if args.format == "br0.2.1":
        return _run_br(args.inputs, config)
    out = build_report(args.inputs, config)
    print(f"report: {out.index} ({out.page_bytes / 1024:.0f} KiB): {out.inputs} input{'s' if out.inputs != 1 else ''}, "
          f"{out.valid} VALID, {out.invalid} INVALID")
    for name in ("report.json", "report.md"):
        print(f"        {out.out_dir / name}")
    return 0
