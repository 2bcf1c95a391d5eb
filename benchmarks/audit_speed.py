"""Time `infkit audit` on a manifest with 10,000 subjects (target: <= 2 s on a 2-core machine).

Builds a run directory of small files (JSON records without a schema marker, text
files, plus run.json, fingerprint.json and a result.json that are validated),
signs it with a throwaway key, then audits it in-process and through the CLI.

    .venv/bin/python benchmarks/audit_speed.py [--files 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.keys import init_key
from harness.manifest.sign import sign_run
from harness.rundir.record import RunRecord, native_image, write_run_record

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "tests" / "examples" / "valid"


def build_run(root: Path, files: int) -> Path:
    run_dir = root / "runs" / "bench" / "20261130T000000Z-000000"
    write_run_record(run_dir, RunRecord(
        semantic_id="INF-PREFIX-CACHE", run_id="20261130T000000Z-000000", run_label="audit-speed",
        requested={}, effective={}, evidence_level="single", decision="inconclusive",
        images=[native_image("INF-CPU")], command=["benchmarks/audit_speed.py"],
    ))
    shutil.copy(EXAMPLES / "fingerprint-no-gpu.json", run_dir / "fingerprint.json")
    shutil.copy(EXAMPLES / "serving-single.json", run_dir / "result.json")
    for i in range(files - 3):
        folder = run_dir / f"part-{i % 100:03d}"
        folder.mkdir(exist_ok=True)
        if i % 2:
            (folder / f"{i:05d}.json").write_text(json.dumps({"request": i, "ttft_ms": 10.0 + i % 97}))
        else:
            (folder / f"{i:05d}.txt").write_text(f"line {i}\n" * 4)
    return run_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="infkit-audit-speed-") as tmp:
        root = Path(tmp) / "repo"
        run_dir = build_run(root, args.files)
        key_path = Path(tmp) / "key.pem"
        init_key(key_path)
        t0 = time.perf_counter()
        manifest = sign_run(run_dir, root=root, key_path=key_path)
        sign_s = time.perf_counter() - t0
        manifest_kib = manifest.stat().st_size / 1024

        in_process_s = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            (report,) = audit_paths([manifest], AuditConfig(root=root))
            in_process_s.append(time.perf_counter() - t0)
            assert report.valid and report.subjects == args.files, report.findings

        cli_s = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "harness", "audit", str(manifest), "--root", str(root)],
                                  capture_output=True, text=True)
            cli_s.append(time.perf_counter() - t0)
            assert proc.returncode == 0, proc.stdout + proc.stderr

    print(f"subjects:            {args.files}")
    print(f"manifest size:       {manifest_kib:.0f} KiB")
    print(f"sign:                {sign_s:.3f} s")
    print(f"audit (in process):  median {statistics.median(in_process_s):.3f} s  (runs: "
          + ", ".join(f"{s:.3f}" for s in in_process_s) + ")")
    print(f"audit (CLI, total):  median {statistics.median(cli_s):.3f} s  (runs: "
          + ", ".join(f"{s:.3f}" for s in cli_s) + ")  target <= 2 s: "
          + ("met" if statistics.median(cli_s) <= 2.0 else "MISSED"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
