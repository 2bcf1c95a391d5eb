"""The docker runtime's pure parts: mounts, argv, image records, GPU/driver gate, run.json update."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.contract.schemas import validate_document
from harness.errors import CapabilityMissing
from harness.images.locks import load_lock
from harness.runinfo import CONTAINER_IMAGE_ENV, RunRecord, native_image
from harness.runtime.base import get_runtime
from harness.runtime.docker import (
    HARNESS_MOUNT,
    DockerRuntime,
    DockerSettings,
    check_gpu_request,
    container_argv,
    image_record,
    mounts_for,
)

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


def test_a_draft_model_named_inside_a_json_argument_is_mounted_too(tmp_path: Path):
    run_dir, harness, draft = tmp_path / "run", tmp_path / "repo", tmp_path / "drafts" / "eagle"
    for d in (run_dir, harness, draft):
        d.mkdir(parents=True)
    spec = json.dumps({"method": "eagle", "model": str(draft), "num_speculative_tokens": 3})
    volumes = mounts_for(("vllm", "--speculative-config", spec, "--x", "{not json"), run_dir, harness)
    assert volumes[str(draft)] == {"bind": str(draft), "mode": "ro"}
    assert set(volumes) == {str(harness), str(run_dir), str(draft)}


def test_server_listens_inside_the_container_namespace():
    assert container_argv(("vllm", "--host", "127.0.0.1", "--port", "8000")) == ["vllm", "--host", "0.0.0.0", "--port", "8000"]
    assert container_argv(("x", "--host=127.0.0.1")) == ["x", "--host=0.0.0.0"]


def test_image_record_local_build_vs_locked_digest():
    lock = load_lock("inf-cpu")
    local = FakeImage("sha256:" + "1" * 64, [lock.local_ref], {"io.infkit.base.substituted-for": lock.base_image},
                      {"RepoDigests": [f"{lock.local_ref.split(':')[0]}@{DIGEST}"]})
    assert image_record(lock, local) == {"role": "inf-cpu", "ref": lock.local_ref, "digest": local.id,
                                         "base_substituted": lock.base_image}
    doc = json.loads(json.dumps(lock.doc))
    doc["image"]["digest"] = DIGEST
    pushed_lock = type(lock)(lock.role, lock.path, doc)
    pulled = FakeImage("sha256:" + "2" * 64, [], {}, {"RepoDigests": [f"{lock.registry_ref}@{DIGEST}"]})
    assert image_record(pushed_lock, pulled) == {"role": "inf-cpu", "ref": lock.registry_ref, "digest": DIGEST,
                                                 "base_substituted": None}


def test_cuda_role_needs_a_gpu_and_a_new_enough_driver():
    lock = load_lock("inf-vllm-011-cu128")
    with pytest.raises(CapabilityMissing, match="needs a GPU"):
        check_gpu_request(lock, (), DockerSettings())
    check_gpu_request(load_lock("inf-cpu"), (), DockerSettings())  # CPU roles need nothing


def test_settings_from_env():
    s = DockerSettings.from_env({"INFKIT_IMAGE": "localhost/x:1", "INFKIT_CUDA_FORWARD_COMPAT": "1"})
    assert s.image == "localhost/x:1" and s.forward_compat
    assert DockerSettings.from_env({}) == DockerSettings()


def test_inside_a_role_image_the_run_records_the_container_image(monkeypatch):
    image = {"role": "inf-cpu", "ref": "localhost/infkit/inf-cpu:0.1.0", "digest": DIGEST, "base_substituted": None}
    assert native_image("INF-CPU")["native"] is True
    monkeypatch.setenv(CONTAINER_IMAGE_ENV, json.dumps(image))
    entry = native_image("INF-CPU")  # the role keeps the experiment's spelling
    assert entry == {**image, "role": "INF-CPU"}
    record = RunRecord(semantic_id="INF-ITERATION-BUDGET", run_id="r1", run_label="t", requested={}, effective={},
                       evidence_level="single", decision="inconclusive", images=[entry])
    assert validate_document(record.to_dict()) == []

