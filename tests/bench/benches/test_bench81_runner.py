"""bench-81 end to end against stand-in engines (fast): the closed loop at saturation, a client-spread replica group,
the scaling reading, a signed run that audits VALID; and its flags and GPU command lines as data."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from harness.backends.vllm import VllmBackend
from harness.bench import runner as runner_mod
from harness.bench.benches.bench81 import SPEC, Config, loaded
from harness.bench.benches.bench81 import parallel as dist
from harness.bench.spec import History
from harness.contract.schemas import validate_file
from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
from harness.progress import Reporter
from tests.bench.test_bench_runner import FakeBackend, bench_env  # noqa: F401

REPO = Path(__file__).resolve().parents[3]


def test_bench81_measures_a_replica_group_against_the_baseline_and_signs_it(bench_env):  # noqa: F811
    cfg = Config(backend="fake", runtime="local", layouts=("dp2-replicas",), requests=8, starts=3,
                 warmup_requests=1, resamples=300, concurrency=4)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    run_dir, result = outcome.run_dir, outcome.result
    assert not outcome.failed and validate_file(run_dir / "sweep.json") == []
    details = result["details"]
    # each layout saturated alike: a closed loop of 4 in flight per device, 8 requests per device
    assert details["offered_rps"] is None and details["concurrency_per_device"] == 4
    assert details["load_multiples"] == {"single": 1, "dp2-replicas": 2}
    sent = {label: len((run_dir / "arms" / label / "r1" / "requests.jsonl").read_text().splitlines())
            for label in ("single", "dp2-replicas")}
    assert sent == {"single": 8, "dp2-replicas": 16}
    rows = {r["layout"]: r for r in details["layouts"]}
    assert set(rows) == {"single", "dp2-replicas"} and rows["dp2-replicas"]["devices"] == 2
    eff = rows["dp2-replicas"]["efficiency"]
    assert eff["ci_low"] <= eff["value"] <= eff["ci_high"] and rows["dp2-replicas"]["repeats"] == 3
    assert rows["dp2-replicas"]["starts"] == rows["single"]["starts"] == 3
    # ABAB restarts: the baseline's start, then the layout's, three rounds; each a server start of its own
    order = [(a["label"], a["repeat"]) for a in details["arm_runs"]]
    assert order == [("single", 1), ("dp2-replicas", 1), ("single", 2), ("dp2-replicas", 2),
                     ("single", 3), ("dp2-replicas", 3)]
    # every replica served: the arm's server metrics sum both replicas' counters
    arm = json.loads((run_dir / "arms" / "dp2-replicas" / "r1" / "result.json").read_text())
    assert len(arm["details"]["server_metrics"]["urls"]) == 2
    assert len(arm["details"]["server_group"]["endpoints"]) == 2
    servers = {s["name"]: s for s in json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]}
    members = servers["dp2-replicas"]["group"]["members"]
    assert [m["role"] for m in members] == ["replica", "replica"] and all(m["exit_status"] is not None for m in members)
    assert "efficiency" in outcome.finished.summary and "load: closed loop at saturation" in outcome.finished.summary
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid, report


@pytest.mark.parametrize("values, message", [
    (dict(layouts=("pp3",)), "--layouts"),
    (dict(node_rank=1), "NODE_RANK=1 is a follower"),
    (dict(nnodes=0), "--nnodes must be at least 1"),
    (dict(layouts=()), "--layouts: needs at least one value"),
    (dict(layouts=("pp2", "pp2")), "names a layout twice"),
    (dict(concurrency=0), "--concurrency must be at least 1"),
])
def test_bad_bench81_values_are_one_line_errors(values, message):
    with pytest.raises(InvalidInput, match=message):  # a config checks itself as it is made
        Config(**values)


def test_gpu_forms_make_the_engines_own_multi_node_command_lines():
    cfg = Config(layouts=("ray-executor",), nnodes=2, master_addr="10.0.0.1", master_port=29511,
                 ray_address="10.0.0.1:6379")
    variants = {v.name: v for v in dist.variants(cfg, cpu=False)}
    assert list(variants) == ["single", "ray-executor", "nodes-head"]
    backend = VllmBackend()
    base = dict(model_dir="/m", served_model_name="m", port=8000, gpus=(0, 1))
    from harness.backends.base import BackendConfig

    ray = backend.server_spec(BackendConfig(**base, **variants["ray-executor"].settings))
    assert "--distributed-executor-backend" in ray.argv and ray.env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert ray.argv[ray.argv.index("--pipeline-parallel-size") + 1] == "2" and ray.gpus == (0, 1)
    head = backend.server_spec(BackendConfig(**base, **variants["nodes-head"].settings))
    at = head.argv.index("--nnodes")
    assert head.argv[at:at + 8] == ("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1",
                                    "--master-port", "29511")
    assert "PYTHONPATH" not in ray.env  # the GPU image ships its own Ray


@pytest.mark.parametrize("script, env, expected", [
    ("ray-node.sh head", {"NODE_IP": "10.0.0.1", "IFNAME": "ib0"},
     ["start --block --node-ip-address 10.0.0.1 --head --port 6379", "-e NCCL_SOCKET_IFNAME=ib0",
      "-e GLOO_SOCKET_IFNAME=ib0", "-e VLLM_HOST_IP=10.0.0.1", "--network host"]),
    ("ray-node.sh worker", {"NODE_IP": "10.0.0.2", "HEAD_ADDR": "10.0.0.1"}, ["--address 10.0.0.1:6379"]),
    ("vllm-node.sh", {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MODEL_DIR": "/m"},
     ["serve /m", "--pipeline-parallel-size 2", "--nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500",
      "--headless", "-v /m:/m:ro"]),
])
def test_node_scripts_print_the_commands_they_run(script, env, expected):
    name, *args = script.split()
    proc = subprocess.run(["sh", str(REPO / "docker" / "comm-parallel" / name), *args], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", **env}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for part in expected:
        assert part in proc.stdout, (part, proc.stdout)


def test_node_scripts_refuse_bad_settings_in_one_line():
    proc = subprocess.run(["sh", str(REPO / "docker" / "comm-parallel" / "vllm-node.sh")], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "NNODES": "2", "NODE_RANK": "0",
                                          "MASTER_ADDR": "h", "MODEL_DIR": "/m"}, timeout=30)
    assert proc.returncode == 2 and "node 0 is the bench: make bench-81 NNODES=2" in proc.stderr


def test_make_variables_name_the_multi_node_forms():
    from harness.knobs import make_vars

    got = make_vars(Config, "RAY_ADDRESS=10.0.0.1:6379 NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 LAYOUTS=ray-executor")
    assert got == {"ray_address": "10.0.0.1:6379", "nnodes": 2, "node_rank": 0, "master_addr": "10.0.0.1",
                   "layouts": ("ray-executor",)}


def test_a_refusal_is_recorded_with_the_engines_root_cause_not_its_wrapper():
    log = ("(EngineCore pid=1) ERROR [core.py:1510] EngineCore failed to start.\n"
           "(EngineCore pid=1) ERROR [core.py:1510] ValueError: current platform cpu does not support ray.\n"
           "ValueError: current platform cpu does not support ray.\n"
           "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert runner_mod.engine_reason(log) == "ValueError: current platform cpu does not support ray."
    assert runner_mod.engine_reason("ERROR engine start failed: a message of another shape") == ""


def test_make_bench_81_runs_the_bench_with_its_make_variables():
    proc = subprocess.run(["make", "-C", str(REPO), "-n", "bench-81", "RAY_ADDRESS=10.0.0.1:6379", "NNODES=2"],
                          capture_output=True, text=True, timeout=60)
    assert "infkit bench 81" in proc.stdout and "RAY_ADDRESS=10.0.0.1:6379" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("cores, want, first", [
    # tp2's baseline serves only tp2, not measurable on 2 cores: nothing is read against it, so it is not started
    (2, {"single": 3, "single-even-heads": 0, "pp2": 1, "tp2": 1, "ray-dp2": 1}, "pp2 start 1"),
    (3, {"single": 3, "single-even-heads": 3, "pp2": 3, "tp2": 3, "ray-dp2": 3}, "single-even-heads start 1"),
])
def test_a_layout_not_measurable_here_is_started_once_and_the_baseline_keeps_its_rounds(cores, want, first):
    cfg = loaded(Config(layouts=("pp2", "tp2", "ray-dp2"), starts=3), None)
    assert (cfg.concurrency, cfg.requests) == (8, 24)  # the CPU reference: three waves of 8 per device
    servers = dist.variants(cfg, cpu=True)
    starts = dist.starts_of(cfg, servers, True, cores)
    assert starts == want
    phases = dist.phases(cfg, servers, starts, True, cores)
    assert len(phases) == sum(want.values())
    # a measurable 2-device layout is loaded as two devices; one not measurable here gets one wave, a serving check
    assert dist.load_multiple("pp2", cfg, True, cores) == (2 if cores >= 3 else 1)
    pp2 = next(p for p in phases if p.name == "pp2 start 1")
    (_, arm), = list(pp2.steps(History(cfg, None)))
    assert (arm.workload.name, arm.workload.common.requests) == (
        ("serving check", cfg.concurrency) if cores < 3 else ("closed x2", 2 * cfg.requests))
    offered = loaded(Config(layouts=("pp2",), rate_rps=1.0), None)
    assert dist.request_list(offered, 1, check=True).common.requests == offered.requests  # one list for all
    assert dist.load_multiple("single", cfg, True, cores) == 1
    assert [p.name for p in phases][:2] == ["single start 1", first]
    assert dist.starts_of(cfg, servers, False, 1) == dict.fromkeys(want, 3)  # GPUs: a device is not a host core


def test_with_no_capacity_cited_a_gpu_run_probes_first_and_loads_each_device_at_it(bench_env, monkeypatch):  # noqa: F811
    """A GPU backend with no bench-66 run cited (the stand-in engine counted as one): the closed-loop probe runs on
    the baseline's first start, the layouts' in-flight load per device is what it held, and the result says where
    the load came from; the probe's runs are not read as a layout's."""
    from harness.bench.lib import gpuload, probed

    monkeypatch.setattr(gpuload, "GPU_BACKENDS", ("fake",))
    monkeypatch.setattr(probed, "GPU_PROBE_CONCURRENCY", 3)  # a small probe on the stand-in engine
    monkeypatch.setattr(probed, "GPU_PROBE_S", 0.5)
    cfg = Config(backend="fake", runtime="local", layouts=("dp2-replicas",), starts=1, warmup_requests=1,
                 resamples=100, capacity_baseline="none")
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    details = outcome.result["details"]
    assert validate_file(outcome.run_dir / "sweep.json") == [] and validate_file(outcome.run_dir / "run.json") == []
    assert details["load"]["in_flight"] == 3 and details["load"]["source"].startswith(
        "load from a closed-loop capacity probe on server single")
    assert details["concurrency_per_device"] == 3 and {r["layout"] for r in details["layouts"]} == {
        "single", "dp2-replicas"}
    sent = {label: len((outcome.run_dir / "arms" / label / "r1" / "requests.jsonl").read_text().splitlines())
            for label in ("single", "dp2-replicas")}
    assert sent == {"single": 9, "dp2-replicas": 18}  # three waves of 3 per device
    assert (outcome.run_dir / "arms" / "probe" / "r1" / "requests.jsonl").is_file()
    assert "load from a closed-loop capacity probe" in (outcome.run_dir / "summary.txt").read_text()


def test_a_cited_gpu_capacity_sizes_each_devices_load_and_the_result_says_so(bench_env, monkeypatch):  # noqa: F811
    """A cited bench-66 run of this backend (the stand-in engine counted as a GPU one): 39 req/s served at an E2E
    P50 of 0.1 s hold 3.9 requests in flight, so 4 per device in three waves; the result names the run."""
    from harness.bench.lib import gpuload
    from tests.bench.test_gpu_load import bench66

    cited = bench66(backend="fake", shape=(256.0, 32.0))
    cited.result.details["baseline"]["saturation"] = {"offered_rps": 40.0, "achieved_rps": 39.0,
                                                        "latency_ms": {"e2e_ms.p50": 100.0}}
    monkeypatch.setattr(gpuload, "GPU_BACKENDS", ("fake",))
    monkeypatch.setattr(gpuload, "cite_choice", lambda choice, root, semantic_id: cited)
    cfg = Config(backend="fake", runtime="local", layouts=("dp2-replicas",), starts=1, warmup_requests=1,
                 resamples=100)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    details = outcome.result["details"]
    assert details["concurrency_per_device"] == 4 and details["load"]["in_flight"] == 3.9
    assert details["load"]["source"].startswith("load from bench-66 run 20261207T000000Z-gpu")
    sent = {label: len((outcome.run_dir / "arms" / label / "r1" / "requests.jsonl").read_text().splitlines())
            for label in ("single", "dp2-replicas")}
    assert sent == {"single": 12, "dp2-replicas": 24}
    assert "load from bench-66 run 20261207T000000Z-gpu" in (outcome.run_dir / "summary.txt").read_text()
