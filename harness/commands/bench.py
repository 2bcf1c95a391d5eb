"""infkit bench NN: run one bench spec end to end (flags derived from the spec's config, or a run file: --config);
--all runs the project exits one after another (``harness.bench.suite``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.bench import bench_specs, get_bench
from harness.bench.lib.hostprofile import size_warning
from harness.bench.placement import resolve_placement
from harness.bench.runfile import Origin, bench_settings, read_run_file, run_file_schema, run_file_text
from harness.bench.runner import run_bench
from harness.bench.spec import BenchConfig, BenchSpec
from harness.bench.startcontrol import start_variance_here
from harness.bench.suite import EXITS, START_CONTROL, run_suite, start_control_first, suite_exit_code, suite_table
from harness.errors import InvalidInput
from harness.knobs import add_config_arguments
from harness.progress import reporter


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a serving bench (e.g. `infkit bench 69`, `infkit bench --config run.yaml`)",
                       description="Run one project exit as a bench spec: " + "; ".join(
                           f"{n} {s.semantic_id}" for n, s in bench_specs().items())
                       + ". `infkit bench --all` runs the project exits one after another, then a table of each "
                         "one's wall time, run directory and decision. `infkit bench --config FILE` runs the bench "
                         "a run file names (docs/runfiles.md).")
    p.add_argument("--all", action="store_true", help="run the benches --exits names one after another; every one "
                   "runs even after a failure; exit non-zero if any failed")
    p.add_argument("--exits", nargs="+", metavar="NN", default=list(EXITS),
                   help=f"the benches --all runs, in this order (default: {' '.join(EXITS)}, the citing order)")
    p.add_argument("--dry-run", action="store_true", help="with --all: print each bench's plan as a JSON list; "
                   "start nothing, write nothing")
    p.add_argument("--make-vars", default="", help=argparse.SUPPRESS)  # Make's MAKEOVERRIDES, for every bench
    p.set_defaults(func=run_all)
    names = p.add_subparsers(dest="bench", metavar="BENCH")
    for name, spec in bench_specs().items():
        b = names.add_parser(name, help=spec.help, description=spec.doc,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        add_bench_arguments(b, spec)


def add_bench_arguments(parser: argparse.ArgumentParser, spec: BenchSpec) -> None:
    """A bench's flags: one per knob of its config, the run file, and what to print instead of running."""
    add_config_arguments(parser, spec.config)
    parser.add_argument("--config", metavar="FILE", help="a run file (YAML: bench and any knobs; docs/runfiles.md); "
                        "Make variables and flags override it, and a run keeps a signed copy")
    parser.add_argument("--print-config", action="store_true",
                        help="write the run file of this command line (YAML) to stdout; start nothing")
    parser.add_argument("--print-schema", action="store_true",
                        help="write the JSON Schema of this bench's run files to stdout; start nothing")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the flags and print the whole plan as JSON (servers, argv, devices, refusals, "
                             "arms in run order); start nothing, write nothing")
    parser.add_argument("--make-vars", default="", help=argparse.SUPPRESS)  # Make's MAKEOVERRIDES (mk/bench.mk)
    parser.set_defaults(func=run)


def expand_argv(argv: list[str]) -> list[str]:
    """``infkit bench --config FILE ...`` runs the bench the file names: its number goes in after ``bench``."""
    if len(argv) < 2 or argv[0] != "bench" or not argv[1].startswith("-") or argv[1] in ("-h", "--help"):
        return argv
    path = None
    for i, arg in enumerate(argv):
        if arg == "--config":
            path = argv[i + 1] if i + 1 < len(argv) else ""
        elif arg.startswith("--config="):
            path = arg.partition("=")[2]
    if path is None:
        return argv
    if not path:
        raise InvalidInput("--config needs a run file", hint="infkit bench --config run.yaml")
    spec, _ = read_run_file(path)
    return ["bench", spec.name, *argv[1:]]


def _relative(path: Path) -> Path:
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_absolute() and path.is_relative_to(cwd) else path


def placed_on_cpu(cfg: BenchConfig) -> bool:
    """The bench serves the CPU default, whose speed the host profile prices."""
    return resolve_placement(cfg.gpu, cfg.backend, cfg.runtime).backend == "vllm-cpu"


def run_all(args: argparse.Namespace) -> int:
    """``infkit bench --all``: every bench's flags are checked before the first one starts."""
    if not args.all:
        raise InvalidInput("name a bench or --all",
                           hint="infkit bench 69, or infkit bench --all; infkit bench --help lists them")
    known = bench_specs()
    unknown = [n for n in args.exits if n not in known]
    if unknown:
        raise InvalidInput(f"--exits: no bench {', '.join(unknown)}", hint=f"benches: {', '.join(known)}")

    def settle(name: str) -> tuple[BenchConfig, Origin]:
        b = argparse.ArgumentParser(prog=f"infkit bench {name}")
        add_bench_arguments(b, known[name])
        return bench_settings(known[name], b.parse_args(["--make-vars", args.make_vars]))

    settled = {name: settle(name) for name in args.exits}
    if args.dry_run:
        from harness.bench.dryrun import dry_run

        print(json.dumps([{**dry_run(known[n], cfg), **origin.record()} for n, (cfg, origin) in settled.items()],
                         indent=2, default=str))
        return 0
    crossing = {n: cfg for n, (cfg, _) in settled.items() if known[n].crosses_starts}
    exits, why = start_control_first(args.exits, crossing, lambda cfg: start_variance_here(cfg, Path.cwd()))
    if why:
        settled[START_CONTROL] = settle(START_CONTROL)
        print(why, file=sys.stderr)
    rows = run_suite(exits, lambda name: run_settled(known[name], *settled[name]))
    print()
    print(suite_table(exits, rows), end="")
    return suite_exit_code(rows)


def run(args: argparse.Namespace) -> int:
    spec = get_bench(args.bench)
    if args.print_schema:
        print(json.dumps(run_file_schema(spec), indent=2))
        return 0
    cfg, origin = bench_settings(spec, args)
    if args.print_config:
        print(run_file_text(spec, cfg), end="")
        return 0
    if args.dry_run:
        from harness.bench.dryrun import dry_run

        print(json.dumps({**dry_run(spec, cfg), **origin.record()}, indent=2, default=str))
        return 0
    return run_settled(spec, cfg, origin)[0]


def run_settled(spec: BenchSpec, cfg: BenchConfig, origin: Origin | None = None) -> tuple[int, Path | None]:
    """Run one bench and print where its files are: (exit status, run directory)."""
    warning = size_warning(spec.name, cfg.size) if placed_on_cpu(cfg) else None
    if warning:
        print(f"bench-{spec.name}: {warning}", file=sys.stderr)
    outcome = run_bench(spec, cfg, root=Path.cwd(), reporter=reporter(f"bench-{spec.name}"), origin=origin)
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
        return 130, _relative(done.path)
    if outcome.failed:
        print("bench failed: the decision is blocked (see the failure above); every completed request is kept")
        return 1, _relative(done.path)
    return 0, _relative(done.path)
