"""The server CPU probe: a real process tree split into the engine (EngineCore and its children) and the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runtime.base import ServerSpec
from harness.runtime.local import LocalRuntime, free_port
from harness.telemetry.cputime import (
    TreeCpu,
    format_cpu_list,
    parse_cpu_list,
    process_tree_cpu,
    sum_tree_cpu,
)

# burn SECONDS of CPU, optionally pinned to one core, then wait to be killed
BURN = """
import os, sys, time
seconds, core = float(sys.argv[1]), int(sys.argv[2])
if core >= 0:
    os.sched_setaffinity(0, {core})
while time.process_time() < seconds:
    pass
time.sleep(120)
"""
# an engine core process (its argv holds vLLM's process title) with a worker child pinned to the lowest core
ENGINE = f"""
import subprocess, sys, time
burn = {BURN!r}
worker = subprocess.Popen([sys.executable, "-c", burn, "0.4", sys.argv[1], "VLLM::Worker"])
exec(burn.replace("sys.argv[1]", "'0.3'").replace("int(sys.argv[2])", "-1"))
"""
# the API server: an engine child, a plain helper child, and a little CPU of its own
SERVER = f"""
import subprocess, sys, time
engine = subprocess.Popen([sys.executable, "-c", {ENGINE!r}, sys.argv[1], "VLLM::EngineCore_DP0"])
helper = subprocess.Popen([sys.executable, "-c", {BURN!r}, "0.6", "-1", "resource_tracker"])
time.sleep(120)
"""
TICKS = 0.05  # /proc counts CPU time in clock ticks (10 ms): a few per process are lost to rounding


def wait_for(pid: int, ready, timeout_s: float = 60.0) -> TreeCpu:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = process_tree_cpu(pid)
        if got is not None and ready(got):
            return got
        time.sleep(0.1)
    raise AssertionError(f"the tree never got there: {process_tree_cpu(pid)}")


def kill_tree(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 9)
    proc.wait(10)


def test_the_engine_processes_and_their_children_are_the_engine_the_rest_the_frontend():
    low = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(low)], start_new_session=True)
    try:
        got = wait_for(proc.pid, lambda t: t.engine_processes == 2 and (t.engine_s or 0) >= 0.7 - TICKS
                       and t.frontend_s >= 0.6 - TICKS)
    finally:
        kill_tree(proc)
    # engine: its own 0.3 s + the worker's 0.4 s; the helper's 0.6 s is the frontend's, never the engine's
    assert 0.7 - TICKS <= got.engine_s < 0.7 + 0.5
    assert 0.6 - TICKS <= got.frontend_s < 0.6 + 0.5
    if len(os.sched_getaffinity(0)) > 1:
        assert got.engine_cores == (low,)  # the worker bound itself: the engine's core, observed
    assert process_tree_cpu(proc.pid) is None  # gone


def test_a_tree_without_an_engine_is_not_split_and_an_unbound_engine_has_no_cores():
    plain = subprocess.Popen([sys.executable, "-c", BURN, "0.2", "-1"], start_new_session=True)
    engine = subprocess.Popen([sys.executable, "-c", SERVER, "-1"], start_new_session=True)  # worker not pinned
    try:
        alone = wait_for(plain.pid, lambda t: t.frontend_s >= 0.2 - TICKS)
        free = wait_for(engine.pid, lambda t: t.engine_processes == 2 and (t.engine_s or 0) >= 0.7 - TICKS)
    finally:
        kill_tree(plain)
        kill_tree(engine)
    assert alone.engine_s is None and alone.engine_processes == 0
    assert free.engine_cores is None


# a headless multi-node follower: no EngineCore, its worker runs directly under the main process
FOLLOWER = f"""
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", {BURN!r}, "0.4", sys.argv[1], "VLLM::Worker_PP1"])
time.sleep(120)
"""


def test_a_followers_worker_without_an_engine_core_is_the_engine():
    low = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", FOLLOWER, str(low)], start_new_session=True)
    try:
        got = wait_for(proc.pid, lambda t: t.engine_processes == 1 and (t.engine_s or 0) >= 0.4 - TICKS)
    finally:
        kill_tree(proc)
    assert got.frontend_s < 0.4 - TICKS  # the worker's compute is never the frontend's
    if len(os.sched_getaffinity(0)) > 1:
        assert got.engine_cores == (low,)


def test_a_local_server_handle_reads_its_tree(tmp_path: Path):
    spec = ServerSpec(argv=(sys.executable, "-c", SERVER, "-1"), port=free_port())
    handle = LocalRuntime().start(spec, tmp_path)
    try:
        got = wait_for(handle.pid, lambda t: t.engine_processes == 2)
        assert handle.cpu_seconds() is not None and got.engine_s is not None
    finally:
        handle.stop(timeout_s=1)
    assert handle.cpu_seconds() is None


def test_a_group_sums_its_members_and_unites_their_engine_cores():
    a = TreeCpu(frontend_s=1.0, engine_s=2.0, engine_processes=2, engine_cores=(1,))
    b = TreeCpu(frontend_s=0.5, engine_s=3.0, engine_processes=2, engine_cores=(2, 3))
    assert sum_tree_cpu([a, None, b]) == TreeCpu(1.5, 5.0, 4, (1, 2, 3))
    assert sum_tree_cpu([None, None]) is None


@pytest.mark.parametrize(("text", "cores"), [("0", (0,)), ("1-3", (1, 2, 3)), ("0,2-3,7", (0, 2, 3, 7))])
def test_cpu_lists_round_trip(text: str, cores: tuple[int, ...]):
    assert parse_cpu_list(text) == cores and format_cpu_list(cores) == text
