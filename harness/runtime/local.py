"""The local runtime: a backend server as a subprocess of this machine.

The server runs in its own process group (so stopping it reaches every worker
it forks), its stdout and stderr go to a log file in the run directory, and its
memory is the summed RSS of the whole process tree (docs/measurement.md: peak memory on CPU).

Each server has a watchdog: a small process in a session of its own that holds the read end
of a pipe whose write end only this process has. When this process dies — SIGKILL, a crash,
a second signal that cut the cleanup short — the pipe reads end-of-file and the watchdog
stops the server's whole process group (SIGTERM, then SIGKILL after ``WATCHDOG_GRACE_S``).
A normal stop closes the pipe after the group is gone, and the watchdog finds nothing to do.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from harness.runtime import reaper
from harness.runtime.base import (
    Runtime,
    ServerHandle,
    ServerSpec,
    ServerStartError,
)
from harness.telemetry.cputime import TreeCpu, process_tree_cpu
from harness.telemetry.rss import process_tree_rss

HEALTH_POLL_S = 0.5
HEARTBEAT_S = 15.0
GROUP_EXIT_WAIT_S = 5.0
WATCHDOG_GRACE_S = 5.0
# The watchdog: block until the pipe on stdin ends, then end the group argv[1] if it still exists.
WATCHDOG = """\
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
while os.read(0, 4096):
    pass
def group(sig):
    try:
        os.killpg(pgid, sig)
        return True
    except OSError:
        return False
if group(signal.SIGTERM):
    end = time.monotonic() + grace
    while group(0) and time.monotonic() < end:
        time.sleep(0.1)
    group(signal.SIGKILL)
"""
# A process started while SIGINT is ignored keeps it ignored (a background job of a script starts so), and stop()
# asks with SIGINT: the server is started through this, which restores SIGINT's default and becomes the server.
DEFAULT_SIGINT = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[2:])
"""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return members


def read_tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def http_ok(url: str, timeout_s: float = 2.0, method: str = "GET") -> bool:
    try:
        req = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_watchdog(pgid: int) -> tuple[subprocess.Popen, int]:
    """The watchdog of process group ``pgid`` and the pipe's write end (close it to let the watchdog go)."""
    read_end, write_end = os.pipe()  # not inheritable: no other child keeps the pipe open
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHDOG, str(pgid), str(WATCHDOG_GRACE_S)],
                                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end


class LocalHandle(ServerHandle):
    """A server subprocess in its own session / process group, with its watchdog."""

    def __init__(self, proc: subprocess.Popen, spec: ServerSpec, log_path: Path, log_fh,
                 watchdog: tuple[subprocess.Popen, int] | None = None):
        self._proc = proc
        self._watchdog = watchdog
        self._spec = spec
        self._log_fh = log_fh
        self.log_path = log_path
        self.base_url = f"http://{spec.host}:{spec.port}"
        self.command = list(spec.argv)
        self.exit_status: int | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return read_tail(self.log_path, lines)

    def wait_healthy(self, timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
        started = time.monotonic()
        next_beat = started + HEARTBEAT_S
        url = self.base_url + self._spec.health_path
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise ServerStartError(
                    f"server exited with status {rc} before it became healthy; log {self.log_path}, last lines:\n"
                    + self.log_tail(25)
                )
            if http_ok(url):
                return
            now = time.monotonic()
            if now - started > timeout_s:
                raise ServerStartError(
                    f"server not healthy at {url} after {timeout_s:.0f} s; log {self.log_path}, last lines:\n"
                    + self.log_tail(25)
                )
            if progress and now >= next_beat:
                progress(f"  still starting ({now - started:.0f} s): {self.log_tail(1)[:120]}")
                next_beat = now + HEARTBEAT_S
            time.sleep(HEALTH_POLL_S)

    def memory_bytes(self) -> int | None:
        """Summed RSS of the server and all its descendants; None once it is gone."""
        return process_tree_rss(self._proc.pid)

    def cpu_seconds(self) -> TreeCpu | None:
        """CPU seconds of the server's tree: its engine processes (and their children) and the rest."""
        return process_tree_cpu(self._proc.pid)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self._proc.poll() is None:
            self._signal_group(signal.SIGINT)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._proc.wait(timeout=10)
        # Workers that outlived the leader are still in the group: never leave them running.
        self._signal_group(signal.SIGKILL)
        deadline = time.monotonic() + GROUP_EXIT_WAIT_S
        while group_members(self._proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._log_fh.closed:
            self._log_fh.close()
        self._release_watchdog()
        reaper.untrack(self)
        self.exit_status = self._proc.returncode
        return self.exit_status

    def _release_watchdog(self) -> None:
        """The group is gone: close the pipe, so the watchdog wakes, finds nothing and exits."""
        if self._watchdog is None:
            return
        proc, write_end = self._watchdog
        self._watchdog = None
        os.close(write_end)
        try:
            proc.wait(timeout=WATCHDOG_GRACE_S + 5)
        except subprocess.TimeoutExpired:
            proc.kill()

    def kill(self) -> None:
        """SIGKILL the whole group at once (a crash in tests; the last resort of a second stop signal)."""
        self._signal_group(signal.SIGKILL)


class LocalRuntime(Runtime):
    name = "local"

    def start(self, spec: ServerSpec, run_dir: Path, log_name: str = "server.log") -> LocalHandle:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / log_name
        log_fh = log_path.open("ab", buffering=0)
        log_fh.write(("$ " + " ".join(spec.argv) + "\n").encode())
        env = {**os.environ, **spec.env}
        if spec.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
        argv = list(spec.argv)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            executable = shutil.which(argv[0], path=env.get("PATH"))
            if executable is None:  # as Popen's own error would say, before the stand-in starts
                log_fh.close()
                raise ServerStartError(f"cannot start {argv[0]}: no such executable")
            argv = [sys.executable, "-I", "-S", "-c", DEFAULT_SIGINT, executable, *argv]
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
                env=env, cwd=run_dir, start_new_session=True,
            )
        except OSError as exc:
            log_fh.close()
            raise ServerStartError(f"cannot start {spec.argv[0]}: {exc}") from exc
        try:
            watchdog = start_watchdog(proc.pid)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            log_fh.close()
            raise
        return reaper.track(LocalHandle(proc, spec, log_path, log_fh, watchdog))


RUNTIME = LocalRuntime
