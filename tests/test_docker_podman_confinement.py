"""A real container under the docker runtime's confinement (podman in CI): no capabilities,
no-new-privileges, a read-only root, tmpfs caches, its own folder as its only writable place, and the
host's log out of its reach. Judged by exit status (distinct per check), as test_docker_podman does."""

from __future__ import annotations

import socket
from dataclasses import replace
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


LOADER_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 20; }
    int (*answer)(void) = (int (*)(void))dlsym(h, "infkit_answer");
    return answer && answer() == 42 ? 0 : 21;
}
"""
MODULE_C = "int infkit_answer(void) { return 42; }\n"


def _compile(tmp_path: Path, source: str, out: Path, *flags: str) -> None:
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the module the container loads")
    src = tmp_path / (out.name + ".c")
    src.write_text(source)
    subprocess.run(["gcc", *flags, "-o", str(out), str(src), "-ldl"], check=True, capture_output=True, timeout=60)


def test_a_module_compiled_into_the_triton_cache_loads_and_tmp_stays_noexec(local_base, tmp_path: Path):
    """Triton compiles its launcher into TRITON_CACHE_DIR and ``dlopen``s it there: in a container started with
    the runtime's own options, a ``.so`` copied into that cache loads, and the same file on ``/tmp`` does not
    (the options the engine was sent are the ones it mounted). Exit statuses name the failed check."""
    servers = tmp_path / "run" / "servers"
    servers.mkdir(parents=True)
    tools = tmp_path / "tools"  # mounted read-only at its own path (an absolute path on the command line)
    tools.mkdir()
    _compile(tmp_path, MODULE_C, tools / "mod.so", "-shared", "-fPIC")
    _compile(tmp_path, LOADER_C, tools / "loader")
    script = ('mkdir -p "$TRITON_CACHE_DIR" && cp "$1/mod.so" "$TRITON_CACHE_DIR/launcher.so" || exit 30; '
              '"$1/loader" "$TRITON_CACHE_DIR/launcher.so" || exit $?; '
              'cp "$1/mod.so" /tmp/launcher.so || exit 31; "$1/loader" /tmp/launcher.so 2>/dev/null && exit 32; '
              "exit 0")
    spec = ServerSpec(argv=("sh", "-c", script, "sh", str(tools)), port=_free_port(), role="inf-cpu")
    runtime = get_runtime("docker")
    runtime.settings = replace(runtime.settings, image=local_base)  # any image with a libc: the base will do
    handle = runtime.start(spec, servers, log_name="server-so.log")
    try:
        status = handle.container.wait(timeout=120)["StatusCode"]
    finally:
        handle.stop(timeout_s=5)
    checks = {20: "the .so in TRITON_CACHE_DIR did not load (a noexec cache tmpfs)", 21: "loaded, wrong symbol",
              30: "cannot write TRITON_CACHE_DIR", 31: "cannot write /tmp", 32: "/tmp is not noexec"}
    assert status == 0, f"{checks.get(status, status)}: {handle.log_tail()}"
    assert "exec" in handle.confinement["tmpfs"][CACHE_MOUNT].split(",")
