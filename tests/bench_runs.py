"""Running the real CLI in a private root, and the one small bench-69 run tests share.

A real server start costs a minute or more on 2 cores, so the small bench-69 run is made once per
test session (``small_bench69`` in conftest.py) and read by every test that needs one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Real-server tests serve eagerly (no torch.compile warm-up: ~20 s less per start on 2 cores, more with a cold
# compile cache); the compiled path, what `make bench-NN` serves, is the shared small bench-69 run's and the doctor's.
EAGER = "--enforce-eager"
BENCH69_SMALL = ("--repeats", "1", "--groups", "2", "--prompts-per-group", "3", "--warmup-requests", "1",
                 "--resamples", "1000")


def infkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def env_for(tmp: Path) -> dict[str, str]:
    # A private config dir: the default key is created there on first use (a key named by
    # INFKIT_SIGNING_KEY must already exist, so that variable is dropped).
    env = {k: v for k, v in os.environ.items() if k not in ("INFKIT_SIGNING_KEY", "INFKIT_SIGNING_KEY_PEM")}
    return {**env, "XDG_CONFIG_HOME": str(tmp / "config"), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}


def audit(root: Path, manifest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(infkit("audit", str(manifest)), cwd=root, env=env_for(root), capture_output=True,
                          text=True, timeout=300)


@dataclass(frozen=True)
class BenchRun:
    """A finished bench command in its own root: the process, its run directory and manifest."""

    root: Path
    proc: subprocess.CompletedProcess
    run_dir: Path
    manifest: Path


def run_bench(root: Path, number: str, semantic_id: str, *args: str, timeout_s: float = 1500) -> BenchRun:
    proc = subprocess.run(infkit("bench", number, *args), cwd=root, env=env_for(root), capture_output=True, text=True,
                          timeout=timeout_s)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((root / "runs" / number).iterdir())
    return BenchRun(root, proc, run_dir, root / "manifests" / semantic_id / f"{run_dir.name}.intoto.json")


def assert_bench_refuses(root: Path, number: str, args: list[str], expected: str) -> None:
    """``infkit bench NUMBER ARGS`` fails before any work: exit 1, one line naming ``expected``, nothing written."""
    proc = subprocess.run(infkit("bench", number, *args), cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert not (root / "runs").exists() and not (root / "manifests").exists()


BENCH69_MID_ARM = ("--repeats", "1", "--groups", "2", "--prompts-per-group", "8", "--warmup-requests", "1",
                   "--no-control", EAGER)


def wait_for(predicate, timeout_s: float, what: str):
    """``predicate()``'s first true value, polled every 0.2 s for ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def bench69_mid_arm(root: Path) -> tuple[subprocess.Popen, Path, Path]:
    """A real bench-69 run (16 requests per arm) started in ``root`` and followed until two requests of its
    first arm are done: the process, its run directory and that arm's requests.jsonl."""
    bench = subprocess.Popen(infkit("bench", "69", *BENCH69_MID_ARM), cwd=root, env=env_for(root),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run_dir = wait_for(lambda: next(iter((root / "runs" / "69").glob("*")), None), 120, "the run dir")
        requests = run_dir / "arms" / "unique-prefix.cache-on" / "r1" / "requests.jsonl"
        wait_for(lambda: requests.is_file() and len(requests.read_text().splitlines()) >= 2, 900,
                 "two completed requests in the first arm")
    except BaseException:
        bench.kill()
        raise
    return bench, run_dir, requests
