"""What every bad-input test asserts: the CLI in a subprocess, a non-zero exit, one line on stderr,
no traceback anywhere, and nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def infkit(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout_s: float = 120) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in a subprocess, as a user runs it."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout_s)


def assert_clean_error(proc: subprocess.CompletedProcess, *expected: str, rc: int = 1) -> str:
    """Exit ``rc``, exactly one non-empty line on stderr that contains every ``expected`` text, no traceback."""
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, both[-3000:]
    assert proc.returncode == rc, f"exit {proc.returncode}, expected {rc}: {both[-2000:]}"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {proc.stderr[-2000:]}"
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


def assert_nothing_left(*paths: Path) -> None:
    for path in paths:
        assert not os.path.lexists(path), f"{path} was left behind"
