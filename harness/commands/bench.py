"""infkit bench NN: run one bench spec end to end (flags derived from the spec's config)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.bench import bench_specs, get_bench
from harness.bench.lib.hostprofile import size_warning
from harness.bench.placement import resolve_placement
from harness.bench.runner import run_bench
from harness.bench.spec import BenchConfig
from harness.knobs import add_config_arguments, config_from_args
from harness.progress import reporter


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a serving bench (e.g. `infkit bench 69`)",
                       description="Run one project exit as a bench spec: " + "; ".join(
                           f"{n} {s.semantic_id}" for n, s in bench_specs().items()))
    names = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for name, spec in bench_specs().items():
        b = names.add_parser(name, help=spec.help, description=spec.doc,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        add_config_arguments(b, spec.config)
        b.add_argument("--dry-run", action="store_true",
                       help="check the flags and print the whole plan as JSON (servers, argv, devices, refusals, "
                            "arms in run order); start nothing, write nothing")
        b.add_argument("--make-vars", default="", help=argparse.SUPPRESS)  # Make's MAKEOVERRIDES (mk/bench.mk)
        b.set_defaults(func=run)


def _relative(path: Path) -> Path:
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_absolute() and path.is_relative_to(cwd) else path


def placed_on_cpu(cfg: BenchConfig) -> bool:
    """The bench serves the CPU default, whose speed the host profile prices."""
    return resolve_placement(cfg.gpu, cfg.backend, cfg.runtime).backend == "vllm-cpu"


def run(args: argparse.Namespace) -> int:
    spec = get_bench(args.bench)
    cfg = config_from_args(spec.config, args, make_overrides=args.make_vars)
    if args.dry_run:
        from harness.bench.dryrun import dry_run

        print(json.dumps(dry_run(spec, cfg), indent=2, default=str))
        return 0
    warning = size_warning(spec.name, cfg.size) if placed_on_cpu(cfg) else None
    if warning:
        print(f"bench-{spec.name}: {warning}", file=sys.stderr)
    outcome = run_bench(spec, cfg, root=Path.cwd(), reporter=reporter(f"bench-{spec.name}"))
    done = outcome.finished
    print()
    print(done.summary, end="")
    print(f"\nrun directory: {_relative(done.path)}")
    files = ["run.json", "summary.txt", "fingerprint.json", *(f"{f}" for f in spec.outputs)]
    result = outcome.result
    print(f"  {result['kind']}.json, " + ", ".join(files))
    print("  arms/<arm>/r<N>/{result.json,requests.jsonl,metrics_*.prom}, servers/server-*.log, workloads/")
    if done.figures:
        print("figures:       " + ", ".join(str(_relative(done.path / f)) for f in done.figures))
    if done.manifest:
        manifest = _relative(done.manifest)
        print(f"manifest:      {manifest}")
        print(f"check it:      infkit audit {manifest}")
    if outcome.aborted:
        print("interrupted: every completed request is kept, and the run is signed as aborted")
        return 130
    if outcome.failed:
        print("bench failed: the decision is blocked (see the failure above); every completed request is kept")
        return 1
    return 0
