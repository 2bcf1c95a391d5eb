"""infkit bench NN: run a paired serving bench end to end (flags derived from the bench's config)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from harness.experiments import bench69

HELP = {
    "scale": "multiply the number of prefix groups (more requests per arm)",
    "repeats": "interleaved A/B repeats (< 3 lowers the evidence level)",
    "gpu": "GPU index for the containerized vLLM path; without a GPU the CPU default runs",
    "runtime": "local or docker (default: docker with a GPU and an engine, else local)",
    "backend": "vllm-cpu, vllm or sglang (default follows the runtime)",
    "control": "run the shared-prefix cache-off control arm",
    "sign": "sign the run directory into manifests/",
}
BENCHES = {"69": (bench69.Bench69Config, bench69.run_bench69, bench69.__doc__)}


def _add_config_flags(parser: argparse.ArgumentParser, config_cls: type) -> None:
    for f in dataclasses.fields(config_cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                                help=HELP.get(f.name))
            continue
        kind = {int: int, float: float}.get(type(default), str)
        if isinstance(default, Path):
            kind = Path
        parser.add_argument(flag, dest=f.name, type=kind, default=default,
                            help=f"{HELP.get(f.name, '')} (default: {default})".strip())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a paired serving bench (e.g. `infkit bench 69`)")
    benches = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for number, (config_cls, _, doc) in BENCHES.items():
        b = benches.add_parser(number, help=doc.strip().splitlines()[0], description=doc,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_config_flags(b, config_cls)
        b.set_defaults(func=run)


def _config(args: argparse.Namespace, config_cls: type) -> Any:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)}
    for key in ("gpu", "runtime", "backend"):
        values[key] = values[key] or None  # an empty Make variable means "not set"
    return config_cls(**values)


def _relative(path: Path) -> Path:
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_absolute() and path.is_relative_to(cwd) else path


def run(args: argparse.Namespace) -> int:
    config_cls, runner, _ = BENCHES[args.bench]
    outcome = runner(_config(args, config_cls), root=Path.cwd(), progress=lambda line: print(line, flush=True))
    out = outcome.outputs
    print()
    print(out.summary, end="")
    print(f"\nrun directory: {_relative(out.run_dir)}")
    print("  comparison.json, summary.txt, ttft_cdf.png, run.json, fingerprint.json,")
    print("  arms/<arm>/r<N>/{result.json,requests.jsonl,metrics_*.prom}, servers/server-*.log")
    if out.manifest:
        manifest = _relative(out.manifest)
        print(f"manifest:      {manifest}")
        print(f"check it:      infkit audit {manifest}")
    if outcome.failed:
        print("bench failed: the decision is blocked (see the failure above); every completed request is kept")
        return 1
    return 0
