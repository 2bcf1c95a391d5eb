"""The local runtime against a stand-in server process: health wait, log, RSS, clean stop."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.runtime.base import ServerSpec, ServerStartError, get_runtime
from harness.runtime.local import free_port

FAKE = Path(__file__).with_name("fake_server.py")


def spec(*extra: str) -> ServerSpec:
    port = free_port()
    return ServerSpec(argv=(sys.executable, str(FAKE), str(port), *extra), port=port, env={"INFKIT_FAKE": "1"})


def test_registered_as_local():
    assert get_runtime("local").name == "local"


def test_waits_for_health_logs_and_stops_whole_group(tmp_path):
    child_file = tmp_path / "child.pid"
    handle = get_runtime("local").start(spec("--health-delay", "1.0", "--child-pid-file", str(child_file)), tmp_path)
    try:
        t0 = time.monotonic()
        handle.wait_healthy(timeout_s=20)
        assert time.monotonic() - t0 >= 0.9  # 503 before the delay is not healthy
        assert handle.alive()
        child = int(child_file.read_text())
        # the forked worker's 32 MiB count toward the tree's memory
        assert handle.memory_bytes() > psutil.Process(handle.pid).memory_info().rss + (16 << 20)
    finally:
        handle.stop()  # the default grace: a busy shared host can take seconds to deliver SIGINT's handler
    assert not handle.alive()
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    log = handle.log_path.read_text()
    assert log.startswith("$ ") and "serving on" in log and "shutting down" in log
    assert handle.log_path.parent == tmp_path


def test_a_server_started_while_sigint_is_ignored_still_stops_on_it(tmp_path):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a script
    try:
        handle = get_runtime("local").start(spec(), tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    handle.wait_healthy(timeout_s=20)
    # it would ignore SIGINT too, and be killed after the grace with -9
    assert handle.stop(timeout_s=10.0) == 0 and "shutting down" in handle.log_path.read_text()


def test_sigkill_after_timeout_when_sigint_is_ignored(tmp_path):
    handle = get_runtime("local").start(spec("--ignore-sigint"), tmp_path)
    handle.wait_healthy(timeout_s=20)
    t0 = time.monotonic()
    status = handle.stop(timeout_s=1.0)
    assert status == -9 and time.monotonic() - t0 < 10


def test_death_before_health_reports_log_tail(tmp_path):
    handle = get_runtime("local").start(spec("--health-delay", "60", "--exit-after", "0.5"), tmp_path)
    with pytest.raises(ServerStartError, match=r"(?s)status 7.*simulated engine failure"):
        handle.wait_healthy(timeout_s=30)
    handle.stop()


def test_health_timeout_is_an_error_not_a_hang(tmp_path):
    handle = get_runtime("local").start(spec("--health-delay", "60"), tmp_path)
    try:
        with pytest.raises(ServerStartError, match="not healthy"):
            handle.wait_healthy(timeout_s=1.5)
    finally:
        handle.stop(timeout_s=5)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN])
def test_missing_executable_is_a_clear_error(tmp_path, sigint):
    previous = signal.signal(signal.SIGINT, sigint)
    try:
        with pytest.raises(ServerStartError, match="cannot start"):
            get_runtime("local").start(ServerSpec(argv=(str(tmp_path / "nope"),), port=1), tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_spec_env_reaches_the_server(tmp_path):
    handle = get_runtime("local").start(spec(), tmp_path)
    try:
        handle.wait_healthy(timeout_s=20)
        assert psutil.Process(handle.pid).environ().get("INFKIT_FAKE") == "1"
        assert os.getpgid(handle.pid) == handle.pid  # its own process group
    finally:
        handle.stop()
