"""A server that accepts connections and then sends nothing must not cost the run: Ctrl-C ends it in
bounded time with a record for every request and a result, and a timed-out run lists its gauge series."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.workload import make_workload, write_workload
from harness.workload.arrival import Arrival
from harness.workload.generators import Common
from tests.bench_runs import env_for, infkit
from tests.fake_openai_server import FakeConfig, FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
REQUESTS = 12
BOUND_S = 15.0  # Ctrl-C to exit: one short scrape, the workers' records, the result (the old code never finished)


@pytest.fixture(scope="module")
def workload_file(tokenizer_dir, tmp_path_factory) -> Path:
    made = make_workload("random", Common(arrival=Arrival("closed", concurrency=2), requests=REQUESTS,
                                          input_tokens=20, output_tokens=6), {}, tokenizer_dir)
    return write_workload(tmp_path_factory.mktemp("wl") / "random.jsonl", made)


def start_run(srv: FakeOpenAIServer, workload: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(infkit("run", "--endpoint", srv.url, "--model", "fake", "--workload", str(workload),
                                   "--out", str(out), *extra), cwd=REPO, env=env_for(out.parent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(predicate, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not get where the test needs it"
        time.sleep(0.05)


def interrupt(proc: subprocess.Popen) -> tuple[float, str]:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=BOUND_S + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return time.monotonic() - t0, err


def assert_every_request_written(out: Path, err: str) -> dict:
    assert "Traceback" not in err, err[-3000:]
    assert validate_file(out / "result.json") == [], err[-2000:]
    doc = json.loads((out / "result.json").read_text())
    assert doc["conclusion"]["failure"]["kind"] == "aborted"
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in records) == list(range(REQUESTS))
    assert sum(doc["correctness"]["termination_counts"].values()) == REQUESTS
    return doc


def test_ctrl_c_while_the_server_stalls_before_the_first_request(workload_file, tmp_path):
    out = tmp_path / "run"
    # The health check before the run is answered; the /metrics scrape that opens the run never is.
    with FakeOpenAIServer(FakeConfig(stall_after_health=1)) as srv:
        proc = start_run(srv, workload_file, out)
        wait_until(lambda: (out / "requests.jsonl").is_file(), proc)
        time.sleep(0.5)
        took, err = interrupt(proc)
    assert proc.returncode == 130 and took < BOUND_S, (took, err[-2000:])
    doc = assert_every_request_written(out, err)
    assert doc["correctness"]["termination_counts"] == {"not_sent": REQUESTS}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_while_the_server_stalls_mid_run(workload_file, tmp_path, workers):
    out = tmp_path / "run"
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.01, stall_after=6)) as srv:
        proc = start_run(srv, workload_file, out, "--client-workers", workers)
        wait_until(lambda: srv.stalled(), proc)
        time.sleep(1.0)
        took, err = interrupt(proc)
    assert proc.returncode == 130 and took < BOUND_S, (took, err[-2000:])
    doc = assert_every_request_written(out, err)
    counts = doc["correctness"]["termination_counts"]
    assert counts.get("length", 0) >= 2 and counts.get("cancelled", 0) >= 1, counts


def test_a_timed_out_run_lists_its_partial_gauge_series(workload_file, tmp_path):
    out = tmp_path / "run"
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.2, stall_after=3)) as srv:
        proc = start_run(srv, workload_file, out, "--timeout", "2")
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4 and "Traceback" not in err, err[-2000:]
    doc = json.loads((out / "result.json").read_text())
    gauges = doc["details"]["server_metrics"]["gauges"]
    assert gauges["failed_polls"] >= 1  # the polls after the stall: the series covers only the start of the run
    if (out / "gauges.jsonl").exists():
        assert gauges["file"] == "gauges.jsonl"
        assert len((out / "gauges.jsonl").read_text().splitlines()) == gauges["rows"] >= 1
    else:
        assert gauges["file"] is None and gauges["rows"] == 0
