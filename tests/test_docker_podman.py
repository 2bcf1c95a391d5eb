"""inf-cpu built with podman from a local Debian base, then driven through the docker SDK.

Needs a Docker-API engine (``DOCKER_HOST``) and the local base image
(``INFKIT_LOCAL_BASE_IMAGE``); ``.ci/setup-docker.sh`` provides both with rootful
podman. Skips without them, fails instead when ``INFKIT_REQUIRE_DOCKER=1``. The
images are built once per session by the fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.images.locks import REPO_ROOT, load_lock
from harness.runtime.base import ServerSpec, ServerStartError, get_runtime
from harness.runtime.docker import HARNESS_MOUNT
from harness.runtime.docker_run import run_harness

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def test_image_records_the_base_substitution(inf_cpu):
    lock = load_lock("inf-cpu")
    labels = inf_cpu.labels
    assert labels["io.infkit.base.substituted-for"] == lock.base_image
    assert labels["org.opencontainers.image.base.name"] == os.environ["INFKIT_LOCAL_BASE_IMAGE"]
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert labels["io.infkit.role"] == "inf-cpu"
    assert inf_cpu.attrs["Config"]["User"] == "10001:10001"


def test_harness_command_in_container_writes_a_schema_valid_document(inf_cpu, tmp_path: Path):
    run_dir = tmp_path / "run"
    out = run_dir / "fingerprint.json"
    outcome = run_harness("inf-cpu", ["fingerprint", "--out", str(out)], run_dir)
    assert outcome.exit_code == 0, outcome.log_path.read_text()
    assert validate_file(out) == []
    doc = json.loads(out.read_text())
    assert doc["host"]["os"].startswith("Debian GNU/Linux 12")  # ran in the image, not on the host's venv
    assert doc["python"]["version"].startswith("3.11")
    assert outcome.image["digest"] == inf_cpu.id
    assert outcome.image["base_substituted"] == load_lock("inf-cpu").base_image
    # the harness inside validates with the schemas it reads from the read-only mount
    check = run_harness("inf-cpu", ["validate", str(out)], run_dir, log_name="validate.log")
    assert check.exit_code == 0 and "valid" in check.log_path.read_text()


def test_cpu_mechanism_in_container_records_its_image_and_is_signed_on_the_host(inf_cpu, tmp_path: Path,
                                                                             monkeypatch):
    if importlib.util.find_spec("harness.commands.mech") is None:
        pytest.skip("`infkit mech` is not in this checkout yet (the fingerprint test covers the same path)")
    from harness.cli import main
    from harness.rundir.directory import sign_queued

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the host's (throwaway) key
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    queue = tmp_path / ".sign-queue-test"
    outcome = run_harness("inf-cpu", ["mech", "budget", "--out", str(tmp_path), "--run-id", "r1", "--quiet"], tmp_path,
                          sign_queue=queue)
    assert outcome.exit_code == 0, outcome.log_path.read_text()
    run_dir = tmp_path / "budget" / "r1"
    assert queue.read_text().split() == [str(run_dir)]  # queued in the container, not signed there
    assert not (tmp_path / "manifests").exists()
    (manifest,) = sign_queued(queue, tmp_path)
    assert not queue.exists() and manifest == tmp_path / "manifests/INF-ITERATION-BUDGET/r1.intoto.json"
    monkeypatch.chdir(tmp_path)
    assert main(["audit", str(manifest)]) == 0
    assert validate_file(run_dir / "result.json") == []
    assert validate_file(run_dir / "run.json") == []
    images = json.loads((run_dir / "run.json").read_text())["images"]
    assert [i["digest"] for i in images] == [inf_cpu.id]  # the container, not a native package list
    assert images[0]["base_substituted"] == load_lock("inf-cpu").base_image
    # the mounted harness's revision, read on the host, reaches the run's fingerprint
    from harness.rundir.fingerprint import git_state

    recorded = json.loads((run_dir / "fingerprint.json").read_text())["harness"]
    assert recorded["git_commit"] == git_state(REPO_ROOT)[0]


def test_failing_command_reports_its_exit_code(inf_cpu, tmp_path: Path):
    outcome = run_harness("inf-cpu", ["validate", str(tmp_path / "missing.json")], tmp_path)
    assert outcome.exit_code == 1
    assert "no such file" in outcome.log_path.read_text()


def test_harness_mount_is_read_only_and_has_no_network(api, inf_cpu, tmp_path: Path):
    # Judged by exit status (distinct per check), not by captured output: nothing is sent anywhere.
    script = (f"test -f {HARNESS_MOUNT}/harness/__init__.py || exit 10; "
              # read-only by the mount's own options (the image's user could not write there anyway)
              f"grep -E '^[^ ]+ {HARNESS_MOUNT} [^ ]+ (ro|ro,[^ ]*) ' /proc/mounts >/dev/null || exit 11; "
              'test "$(ls /sys/class/net)" = lo || exit 12; '
              "test $(grep -vc Iface /proc/net/route) -eq 0 || exit 13; exit 0")
    volumes = {str(REPO_ROOT): {"bind": HARNESS_MOUNT, "mode": "ro"}}
    container = api.containers.run(inf_cpu.id, entrypoint=["sh", "-c", script], network_mode="none",
                                   volumes=volumes, detach=True)
    try:
        status = container.wait(timeout=60)["StatusCode"]
    finally:
        container.remove(force=True)
    assert status == 0, {10: "harness not mounted", 11: "harness mount is writable",
                         12: "an interface besides lo", 13: "a network route exists"}.get(status, status)


def test_entrypoint_explains_a_missing_harness_mount(api, inf_cpu):
    import docker

    with pytest.raises(docker.errors.ContainerError) as info:
        api.containers.run(inf_cpu.id, ["fingerprint"], network_mode="none", remove=True, stderr=True)
    assert info.value.exit_status == 2
    assert b"not mounted at /opt/infkit" in info.value.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_lifecycle_through_the_runtime(inf_cpu, tmp_path: Path):
    port = _free_port()
    spec = ServerSpec(
        argv=("python3", "-m", "http.server", str(port), "--bind", "0.0.0.0", "--directory", str(tmp_path)),
        port=port,
        role="inf-cpu",
        health_path="/",
    )
    handle = get_runtime("docker").start(spec, tmp_path)
    try:
        handle.wait_healthy(60)
        assert handle.alive()
        binding = handle.container.attrs["HostConfig"]["PortBindings"][f"{port}/tcp"][0]
        assert binding["HostIp"] == "127.0.0.1"  # never on a public interface
        assert (handle.memory_bytes() or 0) > 1 << 20
        assert handle.image["digest"] == inf_cpu.id
    finally:
        code = handle.stop(timeout_s=10)
    assert code == 0  # SIGINT: the server shut down cleanly
    assert 'GET / HTTP/1.1" 200' in handle.log_path.read_text()


def test_server_that_dies_fails_with_its_log(inf_cpu, tmp_path: Path):
    spec = ServerSpec(
        argv=("python3", "-c", "import sys; print('bad flag --x'); sys.exit(3)"), port=_free_port(), role="inf-cpu"
    )
    handle = get_runtime("docker").start(spec, tmp_path)
    try:
        with pytest.raises(ServerStartError, match="bad flag --x"):
            handle.wait_healthy(60)
    finally:
        assert handle.stop(timeout_s=5) == 3
