"""The docker runtime's parts that need no engine: mounts, argv, user and caches, image records and
resolution, GPU/driver gate, memory formula, stop race, run.json update."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.contract.schemas import validate_document
from harness.errors import CapabilityMissing
from harness.images.locks import load_lock
from harness.rundir.record import CONTAINER_IMAGE_ENV, RunRecord, native_image
from harness.runtime import docker_image
from harness.runtime.base import ServerSpec, get_runtime
from harness.runtime.docker import (
    CACHE_MOUNT,
    HARNESS_MOUNT,
    DockerHandle,
    DockerRuntime,
    DockerSettings,
    container_argv,
    container_options,
    memory_in_use_bytes,
    mounts_for,
)
from harness.runtime.docker_confine import Confinement, HostLog
from harness.runtime.docker_image import check_gpu_request, image_record, resolve_image

DIGEST = "sha256:" + "cd" * 32


@dataclass
class FakeImage:
    id: str
    tags: list[str]
    labels: dict[str, str]
    attrs: dict = field(default_factory=dict)


def test_registered_as_docker():
    assert isinstance(get_runtime("docker"), DockerRuntime)


def test_mounts(tmp_path: Path):
    run_dir, harness, model = tmp_path / "run", tmp_path / "repo", tmp_path / "models" / "smollm2"
    for d in (run_dir, harness, model):
        d.mkdir(parents=True)
    volumes = mounts_for(("python3", "-m", "x", "--model", str(model), f"--out={run_dir}/r.json",
                          "relative/path", "/does/not/exist", "/"), run_dir, harness)
    assert volumes[str(harness)] == {"bind": HARNESS_MOUNT, "mode": "ro"}
    assert volumes[str(run_dir)] == {"bind": str(run_dir), "mode": "rw"}
    assert volumes[str(model)] == {"bind": str(model), "mode": "ro"}
    assert set(volumes) == {str(harness), str(run_dir), str(model)}


def test_a_hub_cache_snapshot_is_mounted_with_the_blobs_its_files_link_to(tmp_path: Path):
    run_dir, harness, repo = tmp_path / "run", tmp_path / "repo", tmp_path / "hub" / "models--acme--tiny"
    snapshot, blobs = repo / "snapshots" / "0123abcd", repo / "blobs"
    for d in (run_dir, harness, snapshot, blobs):
        d.mkdir(parents=True)
    (blobs / "f00d").write_text("{}")
    (snapshot / "config.json").symlink_to("../../blobs/f00d")
    volumes = mounts_for(("vllm", "--model", str(snapshot)), run_dir, harness)
    assert volumes[str(snapshot)] == {"bind": str(snapshot), "mode": "ro"}
    assert volumes[str(blobs.resolve())] == {"bind": str(blobs.resolve()), "mode": "ro"}
    assert set(volumes) == {str(harness), str(run_dir), str(snapshot), str(blobs.resolve())}


def test_a_draft_model_named_inside_a_json_argument_is_mounted_too(tmp_path: Path):
    run_dir, harness, draft = tmp_path / "run", tmp_path / "repo", tmp_path / "drafts" / "eagle"
    for d in (run_dir, harness, draft):
        d.mkdir(parents=True)
    spec = json.dumps({"method": "eagle", "model": str(draft), "num_speculative_tokens": 3})
    volumes = mounts_for(("vllm", "--speculative-config", spec, "--x", "{not json"), run_dir, harness)
    assert volumes[str(draft)] == {"bind": str(draft), "mode": "ro"}
    assert set(volumes) == {str(harness), str(run_dir), str(draft)}


def test_server_listens_inside_the_container_namespace():
    assert container_argv(("vllm", "--host", "127.0.0.1", "--port", "8000")) == [
        "vllm",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert container_argv(("x", "--host=127.0.0.1")) == ["x", "--host=0.0.0.0"]


def test_image_record_local_build_vs_locked_digest():
    lock = load_lock("inf-cpu")
    local = FakeImage(
        "sha256:" + "1" * 64,
        [lock.local_ref],
        {"io.infkit.base.substituted-for": lock.base_image},
        {"RepoDigests": [f"{lock.local_ref.split(':')[0]}@{DIGEST}"]},
    )
    assert image_record(lock, local) == {
        "role": "inf-cpu",
        "ref": lock.local_ref,
        "digest": local.id,
        "base_substituted": lock.base_image,
        "source": "local build",
    }
    doc = json.loads(json.dumps(lock.doc))
    doc["image"]["digest"] = DIGEST
    pushed_lock = type(lock)(lock.role, lock.path, doc)
    pulled = FakeImage("sha256:" + "2" * 64, [], {}, {"RepoDigests": [f"{lock.registry_ref}@{DIGEST}"]})
    assert image_record(pushed_lock, pulled) == {
        "role": "inf-cpu",
        "ref": lock.registry_ref,
        "digest": DIGEST,
        "base_substituted": None,
        "source": "registry",
    }


def test_cuda_role_needs_a_gpu_and_a_new_enough_driver():
    lock = load_lock("inf-vllm-011-cu128")
    with pytest.raises(CapabilityMissing, match="needs a GPU"):
        check_gpu_request(lock, (), False)
    assert check_gpu_request(load_lock("inf-cpu"), (), False) is None  # CPU roles need nothing


def test_settings_from_env():
    s = DockerSettings.from_env(
        {
            "INFKIT_IMAGE": "localhost/x:1",
            "INFKIT_CUDA_FORWARD_COMPAT": "1",
            "INFKIT_PULL_ONLY": "1",
            "INFKIT_LOCAL_BASE_IMAGE": "localhost/base:1",
        }
    )
    assert s.image == "localhost/x:1" and s.forward_compat and s.pull_only and s.base_image == "localhost/base:1"
    assert DockerSettings.from_env({}) == DockerSettings()
    assert DockerSettings(user="54321:54322").uid_gid == (54321, 54322)


def test_inside_a_role_image_the_run_records_the_container_image(monkeypatch):
    image = {"role": "inf-cpu", "ref": "localhost/infkit/inf-cpu:0.1.0", "digest": DIGEST, "base_substituted": None}
    assert native_image("INF-CPU")["native"] is True
    monkeypatch.setenv(CONTAINER_IMAGE_ENV, json.dumps(image))
    entry = native_image("INF-CPU")  # the role keeps the experiment's spelling
    assert entry == {**image, "role": "INF-CPU"}
    record = RunRecord(
        semantic_id="INF-ITERATION-BUDGET",
        run_id="r1",
        run_label="t",
        requested={},
        effective={},
        evidence_level="single",
        decision="inconclusive",
        images=[entry],
    )
    assert validate_document(record.to_dict()) == []


def test_every_container_knows_its_user_home_and_caches(tmp_path: Path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    opts = container_options(("python", "-m", "x"), Confinement(run_dir), DockerSettings(user="54321:54321"))
    env = opts["environment"]
    assert opts["user"] == "54321:54321"
    assert env["USER"] == env["LOGNAME"] == "infkit"  # getpass.getuser() never reaches getpwuid
    assert env["HOME"] == CACHE_MOUNT
    for name in ("TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "HF_HOME"):
        assert env[name].startswith(CACHE_MOUNT + "/"), name
    assert CACHE_MOUNT in opts["tmpfs"]  # caches per container, never a host folder shared across runs
    assert [v for v in opts["volumes"].values() if v["mode"] == "rw"] == [{"bind": str(run_dir), "mode": "rw"}]
    if os.getuid() == 0:
        assert run_dir.stat().st_uid == 54321  # the container's uid can write its own folder


@pytest.mark.parametrize(
    "mem, expected",
    [
        # cgroup v1: total_inactive_file (hierarchical) is the reclaimable cache; inactive_file is local only
        ({"usage": 900, "stats": {"total_inactive_file": 300, "inactive_file": 100}}, 600),
        # cgroup v2: inactive_file
        ({"usage": 900, "stats": {"inactive_file": 250, "file": 400}}, 650),
        # docker CLI: a cache figure not below usage is ignored
        ({"usage": 100, "stats": {"total_inactive_file": 200}}, 100),
        ({"usage": 512, "stats": {}}, 512),
        ({}, None),
    ],
)
def test_container_memory_as_the_docker_cli_computes_it(mem, expected):
    assert memory_in_use_bytes(mem) == expected


class ExitedBetweenChecks:
    """A container that is running at the status check and gone by the time it is signalled."""

    status = "running"

    def __init__(self):
        self.removed = False

    def reload(self):
        pass

    def kill(self, signal):
        docker = pytest.importorskip("docker")
        raise docker.errors.APIError(f"container is not running (signal {signal})")

    def wait(self, timeout):
        return {"StatusCode": 0}

    def logs(self, **_):
        return iter(())

    def remove(self, force):
        self.removed = True

    short_id = "abc"


def test_stop_survives_a_container_that_exits_before_the_signal(tmp_path: Path):
    container = ExitedBetweenChecks()
    handle = DockerHandle(container, ServerSpec(argv=("x",), port=1), HostLog(tmp_path, "s.log"), {})
    assert handle.stop(timeout_s=1) == 0
    assert container.removed


class FakeImages:
    def __init__(self, present: dict[str, object]):
        self.present = present

    def get(self, ref):
        docker = pytest.importorskip("docker")
        if ref not in self.present:
            raise docker.errors.ImageNotFound(ref)
        return self.present[ref]

    def pull(self, ref):
        raise AssertionError(f"nothing may be pulled here ({ref})")


class FakeApi:
    def __init__(self, present):
        self.images = FakeImages(present)


def test_missing_role_image_is_built_on_first_use_unless_pull_only(tmp_path: Path, monkeypatch):
    lock = load_lock("inf-vllm-cpu")
    assert lock.digest is None  # not pushed yet: the case this covers
    built = FakeImage("sha256:" + "5" * 64, [lock.local_ref], {})
    api = FakeApi({})
    with pytest.raises(CapabilityMissing, match="no image digest yet") as err:
        resolve_image(api, lock, pull_only=True, log_dir=tmp_path)
    assert "make images ROLE=inf-vllm-cpu" in err.value.hint

    calls = []

    def fake_build(lock_, cfg, progress):
        calls.append(cfg)
        api.images.present[built.id] = built
        return type("Outcome", (), {"image_id": built.id})()

    monkeypatch.setattr("harness.images.build.build_image", fake_build)
    notices: list[str] = []
    image = resolve_image(
        api, lock, pull_only=False, log_dir=tmp_path, base_image="localhost/base:1", notify=notices.append
    )
    assert image is built
    assert calls[0].base_image == "localhost/base:1"
    assert calls[0].log_path == tmp_path / docker_image.build_log_name("inf-vllm-cpu")
    assert len(notices) == 1 and "building it now" in notices[0] and str(calls[0].log_path) in notices[0]
    # a local build, once there, is used as it is
    api.images.present[lock.local_ref] = built
    assert resolve_image(api, lock, pull_only=True) is built


def test_pull_only_with_a_pushed_digest_runs_the_registry_image_not_a_local_build():
    from harness.images.locks import refreshed

    lock = refreshed(load_lock("inf-cpu"), image_digest=DIGEST, built_utc=None, revision=None)
    local = FakeImage("sha256:" + "1" * 64, [lock.local_ref], {})
    pulled = FakeImage("sha256:" + "2" * 64, [], {}, {"RepoDigests": [lock.pull_ref()]})
    api = FakeApi({lock.local_ref: local, lock.pull_ref(): pulled})
    assert resolve_image(api, lock, pull_only=True) is pulled
    assert image_record(lock, pulled)["source"] == "registry"
    assert resolve_image(api, lock, pull_only=False) is local  # without PULL_ONLY a local build still wins
