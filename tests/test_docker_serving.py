"""The serving role in a container: inf-vllm-cpu built with podman, a uid the image does not
know, and a small bench-69 whose servers run in that image, signed and audited.

Needs what ``tests/test_docker_podman.py`` needs (``.ci/setup-docker.sh``) plus the
model (prepared on the host, mounted read-only). The image is built once per session
(``tests/conftest.py``): about 4 minutes from a warm pip cache on 2 cores, seconds
from podman's layer cache — ``make test`` builds it in its first part, beside the fast
tests, so the server tests find it cached.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.images.build import detect_engine
from harness.images.locks import load_lock
from harness.runtime.base import ServerSpec
from harness.runtime.docker import CACHE_MOUNT, DockerRuntime, DockerSettings, container_options
from harness.runtime.docker_confine import Confinement
from harness.runtime.local import free_port
from tests.bench.benches.test_bench69_integration import arm_results
from tests.bench_runs import BENCH69_SMALL as SMALL
from tests.bench_runs import audit, env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3000)]

UNKNOWN_UID = 54321
# What torch.compile does first: its cache dir (getpass.getuser() when TORCHINDUCTOR_CACHE_DIR is
# unset), then a real compile of a tiny function with the image's g++ and Python headers.
COMPILE_PROBE = """
import getpass, os, pwd
try:
    print("passwd entry", pwd.getpwuid(os.getuid()).pw_name)
except KeyError:
    print("no passwd entry for", os.getuid())
print("user", getpass.getuser())
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir
print("inductor cache", cache_dir())
f = torch.compile(lambda x: x * 2 + 1)
assert f(torch.ones(8)).tolist() == [3.0] * 8
files = sum(len(fs) for _, _, fs in os.walk(cache_dir()))
print("compiled; cache files", files)
raise SystemExit(0 if files else 21)
"""


@pytest.fixture(scope="module")
def prepared():
    return prepared_model_or_skip()


@pytest.mark.serverless  # the build starts no server: make test runs it beside the fast tests, its layers cached
def test_the_serving_image_builds_on_the_local_base_and_records_what_it_was_built_from(inf_vllm_cpu, local_base):
    labels = inf_vllm_cpu.labels
    lock = load_lock("inf-vllm-cpu")
    assert labels["io.infkit.role"] == "inf-vllm-cpu" and labels["org.opencontainers.image.base.name"] == local_base
    assert labels["io.infkit.base.substituted-for"] == lock.base_image
    assert labels["io.infkit.wheelhouse.sha256"].startswith("sha256:")  # its wheels: the host's, hash-checked
    assert inf_vllm_cpu.attrs["Config"]["User"] == "10001:10001"


def test_runtime_container_compiles_as_an_unknown_uid(inf_vllm_cpu, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o777)
    runtime = DockerRuntime(DockerSettings(user=f"{UNKNOWN_UID}:{UNKNOWN_UID}"), notify=lambda line: None)
    spec = ServerSpec(argv=("python", "-c", COMPILE_PROBE), port=free_port(), role="inf-vllm-cpu")
    handle = runtime.start(spec, run_dir, log_name="probe.log")
    try:
        code = int(handle.container.wait(timeout=900)["StatusCode"])
    finally:
        handle.stop(timeout_s=5)
    log = handle.log_path.read_text()
    assert code == 0, log[-3000:]
    assert "user infkit" in log and f"inductor cache {CACHE_MOUNT}/torchinductor" in log
    # the caches live in the container's own tmpfs (read-only root): compiled there, nothing left on the host
    assert "compiled; cache files" in log and "compiled; cache files 0" not in log
    assert not (tmp_path / "cache" / "containers").exists()


def _engine_run(image_id: str, options: dict | None, script: str) -> subprocess.CompletedProcess:
    """The engine's CLI with Docker's behaviour for an unknown uid: no /etc/passwd entry.

    podman writes one for ``--user`` unless ``--passwd=false``; Docker never does. ``options``
    are the runtime's own (``container_options``): its environment and cache mount.
    """
    engine = detect_engine()
    argv = [engine, "run", "--rm", "--network=none", "--user", f"{UNKNOWN_UID}:{UNKNOWN_UID}", "--entrypoint", "python"]
    if engine == "podman":
        argv.append("--passwd=false")
    for name, value in ((options or {}).get("environment") or {}).items():
        argv += ["-e", f"{name}={value}"]
    for host, mount in ((options or {}).get("volumes") or {}).items():
        argv += ["-v", f"{host}:{mount['bind']}:{mount['mode']}"]
    for path, mount_options in ((options or {}).get("tmpfs") or {}).items():  # HOME and caches: a tmpfs each
        argv += ["--tmpfs", f"{path}:{mount_options}"]
    argv += [f"--cap-drop={c}" for c in (options or {}).get("cap_drop") or []]
    argv += [f"--security-opt={o}" for o in (options or {}).get("security_opt") or []]
    argv += ["--read-only"] if (options or {}).get("read_only") else []
    return subprocess.run([*argv, image_id, "-c", script], capture_output=True, text=True, timeout=900)


def test_uid_without_passwd_entry_fails_bare_and_works_with_the_runtime_env(inf_vllm_cpu, tmp_path: Path, monkeypatch):
    # getpass.getuser() is what torch 2.8's inductor cache dir (the GPU images' torch) calls first;
    # torch 2.13 here falls back to "uid_54321" itself, so the call is made directly.
    bare = _engine_run(inf_vllm_cpu.id, None, "import getpass; getpass.getuser()")
    assert bare.returncode != 0 and "getpwuid(): uid not found" in bare.stderr, bare.stdout + bare.stderr[-2000:]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    options = container_options((), Confinement(run_dir), DockerSettings(user=f"{UNKNOWN_UID}:{UNKNOWN_UID}"))
    fixed = _engine_run(inf_vllm_cpu.id, options, COMPILE_PROBE)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr[-3000:]
    assert f"no passwd entry for {UNKNOWN_UID}" in fixed.stdout and "user infkit" in fixed.stdout
    assert "compiled; cache files" in fixed.stdout


def test_containerized_bench69_records_and_audits_the_image(inf_vllm_cpu, prepared, tmp_path: Path):
    # eager: each container compiles in its own tmpfs, so a compiled start would spend minutes compiling again
    argv = infkit("bench", "69", "--runtime", "docker", "--backend", "vllm-cpu", "--enforce-eager", *SMALL)
    proc = subprocess.run(argv, cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (run_dir,) = list((tmp_path / "runs" / "69").iterdir())
    run = json.loads((run_dir / "run.json").read_text())
    assert validate_file(run_dir / "run.json") == []
    assert run["effective"]["runtime"] == "docker" and run["status"] == "completed"
    assert [(i["role"], i["digest"]) for i in run["images"]] == [("inf-vllm-cpu", inf_vllm_cpu.id)]
    servers = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    assert {s["name"] for s in servers} == {"cache-on", "cache-off"}
    for server in servers:
        assert "--enforce-eager" in server["command"]
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
