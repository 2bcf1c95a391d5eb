"""Time `infkit report` over N signed runs and print the page size.

Copies one signed run directory (default: a fresh `mech kvcache` run; or --source RUN_DIR
under --root, e.g. a real bench-69 run) into N runs with their own run ids, signs each with
a throwaway key, then times the report (audit of every input, reading, cross-run chart,
three files) through the CLI, as `make report` runs it.

    .venv/bin/python benchmarks/report_speed.py [--runs 4 16 64] [--source runs/69/<id> --root .]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.manifest.keys import init_key
from harness.manifest.sign import sign_run

REPO = Path(__file__).resolve().parents[1]


def make_runs(source: Path, root: Path, count: int, key: Path) -> list[Path]:
    runs = []
    for n in range(count):
        target = root / "runs" / "bench" / f"{source.name}-{n:04d}"
        shutil.copytree(source, target)
        run = json.loads((target / "run.json").read_text())
        run["run_id"] = target.name
        (target / "run.json").write_text(json.dumps(run, indent=2))
        runs.append(sign_run(target, root=root, key_path=key))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--source", type=Path, help="a run directory to copy (default: a new mech kvcache run)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the root --source is under")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="infkit-report-speed-") as tmp:
        root, key = Path(tmp) / "root", Path(tmp) / "key.pem"
        root.mkdir()
        init_key(key)
        source = args.source.resolve() if args.source else None
        if source is None:
            out = subprocess.run([sys.executable, "-m", "harness", "mech", "kvcache", "--quiet", "--out", "src"],
                                 cwd=root, capture_output=True, text=True, check=True).stdout
            source = root / out.strip().splitlines()[-1].removeprefix("result: ").rsplit("/", 1)[0]
        print(f"source run: {source}")
        for count in args.runs:
            shutil.rmtree(root / "runs", ignore_errors=True)
            manifests = make_runs(source, root, count, key)
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "harness", "report", *map(str, manifests), "-o", "out"],
                                  cwd=root, capture_output=True, text=True)
            wall_s = time.perf_counter() - started
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            page_kib = (root / "out" / "index.html").stat().st_size / 1024
            print(f"{count:5d} runs: {wall_s:6.2f} s wall for `infkit report`, page {page_kib:,.0f} KiB "
                  f"({page_kib / count:.0f} KiB per run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
