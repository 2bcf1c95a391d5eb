"""``infkit bench NN --dry-run``: the plan a GPU user reads before spending GPU time, and what placement tests read.

No GPU, engine or container runtime is needed; the bench's model is a stand-in with SmolLM2's config.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import harness.models.resolve
from harness.bench import bench_specs, get_bench
from harness.bench.dryrun import dry_run
from harness.bench.spec import BenchConfig
from harness.errors import InvalidInput
from harness.runtime import base as runtime_base
from tests.bench.dry_run_model import write_model

REPO = Path(__file__).resolve().parents[2]
LOCAL_BASE = "localhost/infkit/debian-bookworm-minbase:local"
FORMS = {"gpu-one": {"gpu": "1"}, "gpu-two": {"gpu": "2,3"}, "docker": {"runtime": "docker"},
         "sglang": {"gpu": "0", "backend": "sglang"}}


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """A dry run of bench ``name`` with ``options``, in an empty folder on a machine with no GPU and no engine."""
    model = write_model(tmp_path / "cache")
    monkeypatch.setattr(harness.models.resolve, "find_model",
                        lambda key, root=None: model if key == model.key else None)
    monkeypatch.setattr(runtime_base, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(runtime_base, "docker_engine_present", lambda: False)
    for name in ("INFKIT_IMAGE", "INFKIT_PULL_ONLY", "INFKIT_IMAGE_LOCKS"):
        monkeypatch.delenv(name, raising=False)
    # the sglang lock's base digest is a placeholder: its image is built on a local base (tests that plan without
    # one drop this)
    monkeypatch.setenv("INFKIT_LOCAL_BASE_IMAGE", LOCAL_BASE)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def run(name: str, **options) -> dict:
        spec = get_bench(name)
        options.setdefault("proposal_manifest", "none") if name == "68" else None
        doc = dry_run(spec, spec.config(**options))
        assert list(work.iterdir()) == [], "a dry run writes nothing"
        return json.loads(json.dumps(doc, default=str))
    return run


def device_sums(doc: dict) -> list[float]:
    """For every co-resident set and device: the sum of the memory shares of the processes on it."""
    by_variant = defaultdict(list)
    for s in doc["servers"]:
        by_variant[s["variant"]].append(s)
    sums = []
    for names in doc["co_resident"]:
        per_device: dict[int, float] = defaultdict(float)
        for s in (s for n in names for s in by_variant[n] if not s["refused"]):
            for g in s["gpus"]:
                per_device[g] += s["gpu_memory_utilization"]
        sums += per_device.values()
    return sums


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bench", sorted(bench_specs()))
def test_every_bench_plans_every_gpu_form_without_a_gpu(planned, bench, form):
    doc = planned(bench, **FORMS[form])
    assert doc["placement"]["runtime"] == "docker" and doc["placement"]["backend"] in ("vllm", "sglang")
    assert doc["servers"] and doc["arms"]
    offered = {"gpu-one": {1}, "gpu-two": {2, 3}, "docker": {0}, "sglang": {0}}[form]
    for server in doc["servers"]:
        assert server["image"] and server["venv"] is None
        if server["refused"]:
            continue
        assert server["gpus"] and set(server["gpus"]) <= offered, server["name"]
        flag = "--mem-fraction-static" if server["backend"] == "sglang" else "--gpu-memory-utilization"
        argv = server["argv"]
        assert float(argv[argv.index(flag) + 1]) == server["gpu_memory_utilization"]
    assert all(total <= 0.9 + 1e-9 for total in device_sums(doc))


def test_gpu_n_reaches_every_server_and_two_devices_spread_a_two_member_layout(planned):
    doc = planned("81", gpu="2,3", layouts=("dp2-replicas", "pp2"))
    gpus = {s["name"]: s["gpus"] for s in doc["servers"]}
    assert gpus == {"single": [2], "dp2-replicas/replica0": [2], "dp2-replicas/replica1": [3], "pp2": [2, 3]}
    one = planned("81", gpu="1", layouts=("dp2-replicas",))
    shares = {s["name"]: (s["gpus"], s["gpu_memory_utilization"]) for s in one["servers"]}
    assert shares == {"single": ([1], 0.85), "dp2-replicas/replica0": ([1], 0.45), "dp2-replicas/replica1": ([1], 0.45)}


def test_co_resident_servers_split_one_device_and_take_two_when_offered(planned):
    one = planned("68", gpu="0", ngram_tokens=(2, 4))
    # the baseline alone first, then beside each variant; then the float32 identity check's pairs (GPUs serve auto)
    assert one["co_resident"] == [["off"], ["off", "ngram-k2"], ["off", "ngram-k4"], ["off-fp32", "ngram-k2-fp32"],
                                  ["off-fp32", "ngram-k4-fp32"]]
    assert {s["name"]: s["gpu_memory_utilization"] for s in one["servers"]} == {
        n: 0.45 for n in ("off", "ngram-k2", "ngram-k4", "off-fp32", "ngram-k2-fp32", "ngram-k4-fp32")}
    two = planned("68", gpu="0,1", ngram_tokens=(2, 4))
    assert {s["name"]: (s["gpus"], s["gpu_memory_utilization"]) for s in two["servers"]} == {
        "off": ([0], 0.85), "ngram-k2": ([1], 0.85), "ngram-k4": ([1], 0.85), "off-fp32": ([0], 0.85),
        "ngram-k2-fp32": ([1], 0.85), "ngram-k4-fp32": ([1], 0.85)}
    concurrent = planned("70", gpu="0", order="concurrent")
    assert len(concurrent["co_resident"][0]) == 5 and max(device_sums(concurrent)) <= 0.9


def test_layouts_the_pinned_vllm_cannot_start_are_left_out_of_the_default_and_refused_when_asked(planned):
    default = planned("81", gpu="0,1")
    names = [s["variant"] for s in default["servers"]]
    assert "nodes-pp2" not in names and "ray-dp2" not in names
    assert any("nodes-pp2 left out" in n and "PR 23691" in n for n in default["notes"])
    asked = planned("81", gpu="0,1", layouts=("nodes-pp2", "ray-dp2"))
    refused = asked["refused"]
    assert "--nnodes" in refused["nodes-pp2"] and "no container form" in refused["ray-dp2"]
    nodes = [s for s in asked["servers"] if s["variant"] == "nodes-pp2"]
    assert [s["gpus"] for s in nodes] == [[0], [1]] and all(s["host_network"] for s in nodes)
    assert nodes[1]["argv"][1] == "/opt/infkit/harness/backends/vllm_serve.py"  # the shim inside the container
    assert planned("81", gpu="0", layouts=("pp2",))["refused"]["pp2"].startswith("needs 2 devices")


def test_bench68_arms_the_pinned_vllm_refuses_are_capability_missing_before_any_start(planned, tmp_path):
    head = tmp_path / "eagle-head"
    head.mkdir()
    doc = planned("68", gpu="0", eagle_model=str(head), mtp=True, draft_layers=10, self_draft=True)
    refused = doc["refused"]
    assert set(refused) == {"draft-10L", "self-draft", "mtp", "draft-10L-fp32", "self-draft-fp32", "mtp-fp32"}
    assert "NotImplementedError" in refused["draft-10L"] and "MTP layers" in refused["mtp"]
    assert not (Path(refused["draft-10L"]) / "x").exists()  # the draft is named, not made
    assert "eagle" not in refused


def test_sglang_gets_its_own_scheduler_flags_and_refuses_what_it_lacks(planned):
    doc = planned("70", gpu="0", backend="sglang")
    argv = {s["name"]: s["argv"] for s in doc["servers"]}
    assert "--enable-priority-scheduling" in argv["priority"] and "--scheduling-policy" not in argv["priority"]
    # the workload's high class has the lower value (vLLM's order); SGLang 0.5.5 serves higher values first unless
    assert "--schedule-low-priority-values-first" in argv["priority"]
    assert "no async-scheduling flag" in doc["refused"]["overlap"]
    assert set(doc["refused"]) == {"overlap"}


def test_the_cpu_defaults_overlap_variant_is_refused_before_a_start_and_the_gpu_engine_starts_it(planned):
    cpu = planned("70")
    assert set(cpu["refused"]) == {"overlap"} and "forces async_scheduling off" in cpu["refused"]["overlap"]
    assert "--async-scheduling" in next(s["argv"] for s in cpu["servers"] if s["name"] == "overlap")
    assert planned("70", gpu="0")["refused"] == {}  # vLLM 0.11.0 on a GPU applies it


def test_secret_values_are_masked(planned, monkeypatch):
    from harness.bench.launch import masked

    assert masked({"HF_TOKEN": "hf_abc", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}) == {
        "HF_TOKEN": "***", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("gpu", ["abc", "-1"])
def test_a_bad_gpu_is_one_line_and_nonzero_before_anything(tmp_path, gpu):
    proc = subprocess.run([sys.executable, "-m", "harness", "bench", "69", "--dry-run", "--gpu", gpu], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0 and proc.stdout == "" and list(tmp_path.iterdir()) == []
    assert len(proc.stderr.strip().splitlines()) == 1 and "GPU=" in proc.stderr


def test_make_dry_run_passes_the_flag():
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "bench-69", "DRY_RUN=1", "GPU=0"], capture_output=True,
                          text=True)
    assert "--dry-run" in proc.stdout and "--gpu '0'" in proc.stdout


def test_an_unprepared_model_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.models.resolve, "find_model", lambda key, root=None: None)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match="not prepared"):
        dry_run(get_bench("69"), get_bench("69").config())
    assert isinstance(get_bench("69").config(), BenchConfig)


def test_bench69_on_gpu0_shows_its_image_source_mounts_with_options_and_what_each_setup_step_needs(
        planned, monkeypatch, tmp_path):
    monkeypatch.delenv("INFKIT_LOCAL_BASE_IMAGE")
    doc = planned("69", gpu="0")
    model_step, image_step = doc["setup"]
    assert model_step["step"] == "model" and model_step["needs"] == []  # present: nothing fetched or converted
    assert image_step["step"] == "image inf-vllm-011-cu128" and image_step["missing"] is None
    server = doc["servers"][0]
    image = server["image"]  # no digest locked: a build on first use, from the digest-pinned base and PyPI
    assert image["source"] == "build" and image["base"].startswith("docker.io/vllm/vllm-openai:v0.11.0@sha256:")
    assert doc["needs"] == ["PyPI", "registry"] == sorted(image["needs"])
    mounts = server["mounts"]
    assert "exec" in mounts["tmpfs"]["/var/cache/infkit"].split(",")
    assert "noexec" in mounts["tmpfs"]["/tmp"].split(",") and mounts["read_only_root"]
    binds = {b["container"]: b["mode"] for b in mounts["binds"]}
    assert binds["/opt/infkit"] == "ro" and binds[server["argv"][server["argv"].index("--model") + 1]] == "ro"
    # with the image's digest locked, no setup step reaches PyPI: the image is pulled by digest
    locks = tmp_path / "locks"
    locks.mkdir()
    for lock in (REPO / "images").glob("*.lock.json"):
        doc_ = json.loads(lock.read_text())
        if doc_["role"] == "inf-vllm-011-cu128":
            doc_["image"]["digest"] = "sha256:" + "ab" * 32
        (locks / lock.name).write_text(json.dumps(doc_))
    monkeypatch.setenv("INFKIT_IMAGE_LOCKS", str(locks))
    pulled = planned("69", gpu="0")
    assert pulled["needs"] == ["registry"]
    assert pulled["servers"][0]["image"]["ref"] == "ghcr.io/infkit/inf-vllm-011-cu128@sha256:" + "ab" * 32


def test_an_optional_candidate_whose_image_cannot_be_had_is_capability_missing_before_any_start(planned, monkeypatch):
    monkeypatch.delenv("INFKIT_LOCAL_BASE_IMAGE")
    doc = planned("72", gpu="0")
    sglang = {s["variant"] for s in doc["servers"] if s["backend"] == "sglang"}
    assert sglang and sglang <= set(doc["refused"])
    assert all("placeholder base digest" in doc["refused"][n] and "make lock-base ROLE=sglang" in doc["refused"][n]
               for n in sglang)
    assert any(s["backend"] == "vllm" and not s["refused"] for s in doc["servers"])  # the vLLM candidates go on
    monkeypatch.setenv("INFKIT_PULL_ONLY", "1")  # PULL_ONLY without a pushed digest: a required server cannot start
    with pytest.raises(InvalidInput, match="PULL_ONLY=1 refuses to build it"):
        planned("69", gpu="0")


def test_a_ray_executor_joining_a_cluster_runs_its_driver_on_the_host_network(planned):
    joined = planned("81", gpu="0,1", layouts=("ray-executor",), ray_address="10.0.0.5:6379")
    (server,) = [s for s in joined["servers"] if s["variant"] == "ray-executor"]
    assert server["env"]["RAY_ADDRESS"] == "10.0.0.5:6379"
    assert server["host_network"] and server["mounts"]["network"] == "host"
    local = planned("81", gpu="0,1", layouts=("ray-executor",))
    (alone,) = [s for s in local["servers"] if s["variant"] == "ray-executor"]
    assert not alone["host_network"] and alone["mounts"]["network"] == "bridge"


def test_a_given_server_is_shown_where_it_is_with_its_checks_and_nothing_is_planned_to_start_for_it(planned):
    doc = planned("69", server=("cache-off=http://10.0.0.7:8000",))
    (given,) = [s for s in doc["servers"] if s["variant"] == "cache-off"]
    assert given["started_by"] == "user" and given["endpoint"] == "http://10.0.0.7:8000" and "argv" not in given
    assert "cache_config.enable_prefix_caching == False" in given["checks"] and given["refused"] is None
    (started,) = [s for s in doc["servers"] if s["variant"] == "cache-on"]  # the kit's, as before
    assert "started_by" not in started and "--enable-prefix-caching" in started["argv"]


def test_a_given_server_the_schedule_restarts_is_shown_refused(planned):
    doc = planned("70", server=("base=http://10.0.0.7:8000",), order="alternate")
    (given,) = [s for s in doc["servers"] if s["variant"] == "base"]
    assert given["refused"] == "the schedule restarts it, and the kit cannot restart a server it did not start"
