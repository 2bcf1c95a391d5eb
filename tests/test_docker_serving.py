"""The serving role in a container: inf-vllm-cpu built with podman, a uid the image does not
know, and a small bench-69 whose servers run in that image, signed and audited.

Needs what ``tests/test_docker_podman.py`` needs (``.ci/setup-docker.sh``) plus the
model (prepared on the host, mounted read-only). The image is built once per session
(``tests/conftest.py``): about 5 minutes from a warm pip cache on 2 cores, seconds
from podman's layer cache.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.images.locks import load_lock
from harness.runtime.base import ServerSpec
from harness.runtime.docker import CACHE_MOUNT, DockerRuntime, DockerSettings
from harness.runtime.local import free_port
from tests.test_bench69_integration import SMALL, arm_results, audit, env_for, infkit, only_run_dir
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3000)]

UNKNOWN_UID = 54321
# What torch.compile does first: its cache dir (getpass.getuser() when TORCHINDUCTOR_CACHE_DIR is
# unset), then a real compile of a tiny function with the image's g++ and Python headers.
COMPILE_PROBE = """
import getpass, os, pwd, sys
try:
    pwd.getpwuid(os.getuid())
    sys.exit(20)  # the point is a uid the image does not know
except KeyError:
    pass
print("user", getpass.getuser())
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir
print("inductor cache", cache_dir())
f = torch.compile(lambda x: x * 2 + 1)
assert f(torch.ones(8)).tolist() == [3.0] * 8
files = sum(len(fs) for _, _, fs in os.walk(cache_dir()))
print("compiled; cache files", files)
sys.exit(0 if files else 21)
"""


@pytest.fixture(scope="module")
def prepared():
    return prepared_model_or_skip()


def _run_to_exit(runtime: DockerRuntime, argv: tuple[str, ...], run_dir: Path, timeout_s: float = 600) -> tuple[int, str]:
    handle = runtime.start(ServerSpec(argv=argv, port=free_port(), role="inf-vllm-cpu"), run_dir, log_name="probe.log")
    try:
        code = int(handle.container.wait(timeout=timeout_s)["StatusCode"])
    finally:
        handle.stop(timeout_s=5)
    return code, handle.log_path.read_text()


def test_unknown_uid_compiles_with_known_user_and_caches(inf_vllm_cpu, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o777)
    run_dir.chmod(0o777)
    runtime = DockerRuntime(DockerSettings(user=f"{UNKNOWN_UID}:{UNKNOWN_UID}"), notify=lambda line: None)
    code, log = _run_to_exit(runtime, ("python", "-c", COMPILE_PROBE), run_dir)
    assert code == 0, log[-3000:]
    assert "user infkit" in log and f"inductor cache {CACHE_MOUNT}/torchinductor" in log
    # the caches outlive the container, on the host, owned by that uid
    host_cache = tmp_path / "cache" / "containers" / f"inf-vllm-cpu-{UNKNOWN_UID}"
    assert any((host_cache / "torchinductor").rglob("*")), "no compile cache on the host mount"


def test_without_the_runtime_env_the_unknown_uid_fails_as_reported(api, inf_vllm_cpu):
    import docker

    # The failure the runtime's environment prevents: torch's cache dir asks getpwuid.
    probe = "from torch._inductor.runtime.cache_dir_utils import cache_dir; cache_dir()"
    with pytest.raises(docker.errors.ContainerError) as info:
        api.containers.run(inf_vllm_cpu.id, ["-c", probe], entrypoint=["python"], user=f"{UNKNOWN_UID}:{UNKNOWN_UID}",
                           network_mode="none", remove=True, stderr=True)
    assert b"getpwuid(): uid not found" in info.value.stderr


def test_containerized_bench69_records_and_audits_the_image(inf_vllm_cpu, prepared, tmp_path: Path):
    proc = subprocess.run(infkit("bench", "69", "--runtime", "docker", "--backend", "vllm-cpu", *SMALL), cwd=tmp_path,
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert validate_file(run_dir / "run.json") == []
    assert run["effective"]["runtime"] == "docker" and run["status"] == "completed"
    assert [(i["role"], i["digest"]) for i in run["images"]] == [("inf-vllm-cpu", inf_vllm_cpu.id)]
    servers = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    assert {s["name"] for s in servers} == {"cache-on", "cache-off"}
    for server in servers:
        assert server["image"]["digest"] == inf_vllm_cpu.id
        assert server["image"]["base_substituted"] == load_lock("inf-vllm-cpu").base_image
        resets = server["prefix_cache_resets"]
        # vllm-cpu answers {"success": bool}: every reset the run asked for, the engine confirmed
        assert resets["requested"] >= 1 and resets["confirmed"] == resets["requested"], resets
    results = arm_results(run_dir)
    shared = results["shared-prefix.cache-on"]["details"]["server_metrics"]["prefix_cache"]
    assert shared["hits"] > 0  # the server in the container served the shared prefix from its cache
    manifest = tmp_path / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and f"{manifest.relative_to(tmp_path)}: VALID" in checked.stdout, checked.stdout
    assert f"image    inf-vllm-cpu: {inf_vllm_cpu.tags[0]}@{inf_vllm_cpu.id}" in checked.stdout
