"""A real container under the docker runtime's confinement (podman in CI): no capabilities,
no-new-privileges, a read-only root, tmpfs caches, its own folder as its only writable place, and the
host's log out of its reach. Judged by exit status (distinct per check), as test_docker_podman does."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from harness.runtime.base import ServerSpec, get_runtime
from harness.runtime.docker import CACHE_MOUNT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CHECKS = {10: "capabilities left", 11: "no-new-privileges not set", 12: "root filesystem writable",
          13: "own folder not writable", 15: "cache not writable", 16: "cache is not a tmpfs"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_container_is_confined(inf_cpu, tmp_path: Path):
    servers = tmp_path / "run" / "servers"
    servers.mkdir(parents=True)
    log = servers / "server-a.log"
    script = ("grep -Eq '^CapEff:[[:space:]]*0+$' /proc/self/status || exit 10; "
              "grep -Eq '^NoNewPrivs:[[:space:]]*1$' /proc/self/status || exit 11; "
              "touch /probe 2>/dev/null && exit 12; "
              'touch "$PWD/probe" || exit 13; '
              f"(echo planted >> {log}) 2>/dev/null; "  # lands in the container's own /tmp at most
              f"touch {CACHE_MOUNT}/probe || exit 15; "
              f"grep -q ' {CACHE_MOUNT} tmpfs ' /proc/mounts || exit 16; "
              f"touch {servers}/probe 2>/dev/null; exit 0")
    spec = ServerSpec(argv=("sh", "-c", script), port=_free_port(), role="inf-cpu")
    handle = get_runtime("docker").start(spec, servers, log_name="server-a.log")
    try:
        status = handle.container.wait(timeout=120)["StatusCode"]
    finally:
        handle.stop(timeout_s=5)
    assert status == 0, CHECKS.get(status, status)
    # what the container wrote beside its folder never reached the host: not the log, not servers/
    assert handle.log_path == log and "planted" not in log.read_text()
    assert (servers / "server-a" / "probe").exists() and not (servers / "probe").exists()
    assert handle.confinement["capabilities"] == "all dropped" and handle.confinement["read_only_root"]
