"""Server groups: layouts built from a backend's command line, started and stopped as one server.

Command lines are checked as data (vLLM's multi-node launcher, replicas, a Ray cluster); the group
runtime runs real processes (the stand-in engine of tests/bench/fake_engine.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from harness.backends import comm
from harness.backends.base import BackendConfig
from harness.backends.layouts import SERVE_SHIM, Layout, group_spec, headless_argv
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.client.openai import ClientConfig
from harness.client.pool import plan_shares
from harness.errors import CapabilityMissing, InvalidInput
from harness.runtime.base import ServerSpec, ServerStartError, get_runtime
from harness.runtime.group import GroupMember, GroupSpec, start_group
from harness.runtime.local import free_port
from harness.runtime.ray_cluster import RAY, replicas_report
from harness.runtime.serving_env import ServingEnv
from harness.workload.model import Request

ENGINE = Path(__file__).parent / "bench" / "fake_engine.py"
BIND = "VLLM_CPU_OMP_THREADS_BIND"


class Env(ServingEnv):
    def package_version(self, dist: str) -> str | None:
        return "2.60.0"


@pytest.fixture
def backend(tmp_path):
    env = Env(path=tmp_path / "venv", spec=RAY)  # any ready env: only its python path is used
    return VllmCpuBackend(env=env)


def config(port=8000, **kw) -> BackendConfig:
    return BackendConfig(model_dir="/models/m", served_model_name="m", port=port, **kw)


def ports():
    counter = iter(range(9100, 9200))
    return lambda: next(counter)


def test_nodes_layout_is_a_head_and_headless_followers_with_their_own_cores(backend, tmp_path):
    layout = Layout("nodes", 2, ({BIND: "0"}, {BIND: "1"}))
    group = group_spec(backend, config(extra_args=("--pipeline-parallel-size", "2")), layout, ports(), tmp_path)
    head, follower = group.members
    assert head.role == "head" and head.urls == ("http://127.0.0.1:8000",) and group.endpoints == head.urls
    assert follower.role == "follower" and follower.urls == ()
    for rank, member in enumerate(group.members):
        argv = member.spec.argv
        at = argv.index("--node-rank")
        assert argv[at - 2:at + 6] == ("--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                                       "--master-port", "9100")
        assert "--pipeline-parallel-size" in argv and member.spec.env[BIND] == str(rank)
    assert head.spec.argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server") and "--headless" not in head.spec.argv
    assert follower.spec.argv[1] == str(SERVE_SHIM) and follower.spec.argv[-1] == "--headless"
    req = comm.requested(head.spec.argv)
    assert (req["world_size"], req["ranks_per_node"], req["nnodes"], req["master_port"]) == (2, 1, 2, 9100)


def test_a_command_without_a_headless_form_is_a_capability_gap():
    with pytest.raises(CapabilityMissing, match="no headless follower form"):
        headless_argv(ServerSpec(argv=("python3", "-m", "sglang.launch_server"), port=1))


def test_replicas_layout_spreads_over_every_replica(backend, tmp_path):
    group = group_spec(backend, config(), Layout("replicas", 2, ({BIND: "0"}, {BIND: "1"})), ports(), tmp_path)
    assert group.spread == "client" and group.endpoints == ("http://127.0.0.1:8000", "http://127.0.0.1:9100")
    assert [m.spec.env[BIND] for m in group.members] == ["0", "1"]


def test_ray_layout_is_a_head_a_worker_and_a_driver_that_places_one_replica_per_node(backend, tmp_path):
    group = group_spec(backend, config(), Layout("ray", 2, ({BIND: "0"}, {BIND: "1"})), ports(), tmp_path)
    head, worker, driver = group.members
    assert head.spec.argv[1:4] == ("start", "--head", "--block") and head.ready_port == 9101
    assert "--num-cpus" in head.spec.argv and head.spec.env[BIND] == "0"
    assert (
        worker.spec.argv[worker.spec.argv.index("--address") + 1] == "127.0.0.1:9101" and worker.spec.env[BIND] == "1"
    )
    plan = json.loads(driver.spec.argv[driver.spec.argv.index("--plan") + 1])
    assert [p["url"] for p in plan] == list(driver.urls) == list(group.endpoints)
    assert all(BIND not in p["env"] for p in plan)  # the replica takes its node's cores, not its own
    assert all(Path(p["log"]).parent == tmp_path.resolve() for p in plan)
    assert group.engine_spec.argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")
    assert group.settings["ray_version"] == "2.60.0" and group.settings["ray_nodes"] == 2
    line = 'INFKIT_RAY_REPLICAS {"nodes": ["a", "b"], "replicas": []}'
    assert replicas_report(f"noise\n{line}\n") == {"nodes": ["a", "b"], "replicas": []}


@pytest.mark.parametrize(
    "layout, message",
    [
        (dict(kind="mesh"), "unknown layout 'mesh'"),
        (dict(kind="nodes", count=0), "at least one member"),
        (dict(kind="replicas", count=2, env=({},)), "needs 2 environments"),
    ],
)
def test_a_bad_layout_is_one_line(layout, message):
    with pytest.raises(InvalidInput, match=message):
        Layout(**layout)


def fake(port: int, *extra: str) -> ServerSpec:
    return ServerSpec(argv=(sys.executable, str(ENGINE), "--port", str(port), *extra), port=port)


def test_a_group_of_real_processes_is_healthy_measured_and_stopped_together(tmp_path):
    a, b = free_port(), free_port()
    group = GroupSpec(
        (
            GroupMember("replica0", fake(a), urls=(f"http://127.0.0.1:{a}",)),
            GroupMember("replica1", fake(b), urls=(f"http://127.0.0.1:{b}",)),
        ),
        "client",
    )
    handle = start_group(get_runtime("local"), group, tmp_path, "dp")
    try:
        handle.wait_healthy(60)
        assert handle.alive() and handle.endpoints == (f"http://127.0.0.1:{a}", f"http://127.0.0.1:{b}")
        assert handle.memory_bytes() > sum(h.memory_bytes() for h in handle.handles[:1])
        os.killpg(handle.handles[1].pid, signal.SIGKILL)
        handle.handles[1]._proc.wait(10)  # noqa: SLF001
        assert not handle.alive() and handle.dead()[0].name == "replica1"
    finally:
        handle.stop()
    assert not any(h.alive() for h in handle.handles)
    assert {p.name for p in tmp_path.iterdir()} == {"server-dp-replica0.log", "server-dp-replica1.log"}


def test_a_member_that_exits_before_health_names_itself_and_stops_the_others(tmp_path):
    a, b = free_port(), free_port()
    waits = ServerSpec(argv=(sys.executable, "-c", "import time; time.sleep(120)"), port=a)  # a head that waits
    group = GroupSpec(
        (
            GroupMember("node0", waits, urls=(f"http://127.0.0.1:{a}",)),
            GroupMember("node1", fake(b, "--refuse", "collective_rpc should not be called")),
        )
    )
    handle = start_group(get_runtime("local"), group, tmp_path, "nodes")
    try:
        with pytest.raises(ServerStartError, match="group member node1 exited") as err:
            handle.wait_healthy(60)
        assert "collective_rpc should not be called" in str(err.value)
    finally:
        handle.stop()
    assert not handle.handles[0].alive()


def test_the_client_deals_request_i_to_endpoint_i_mod_e():
    reqs = tuple(Request(index=i, input_tokens=4, output_tokens=2, prompt="x") for i in range(7))
    shares = plan_shares(
        reqs,
        ClientConfig(endpoint="http://a", model="m"),
        "r.jsonl",
        workers=3,
        closed_concurrency=4,
        max_concurrency=None,
        endpoints=("http://a", "http://b"),
    )
    assert len(shares) == 2 and sum(s.closed_concurrency for s in shares) == 4
    sent = {r.index: s.client.endpoint for s in shares for r in s.requests}
    assert sent == {i: ("http://a", "http://b")[i % 2] for i in range(7)}
    warm = plan_shares(
        reqs[:2],
        ClientConfig(endpoint="http://a", model="m"),
        "r.jsonl",
        workers=1,
        closed_concurrency=1,
        max_concurrency=None,
        endpoints=("http://a", "http://b"),
    )
    assert [(s.client.endpoint, s.closed_concurrency) for s in warm] == [("http://a", 1), ("http://b", 1)]
    one = plan_shares(
        reqs[:1],
        ClientConfig(endpoint="http://a", model="m"),
        "r.jsonl",
        workers=4,
        closed_concurrency=1,
        max_concurrency=None,
        endpoints=("http://a", "http://b"),
    )
    assert [(s.client.endpoint, len(s.requests)) for s in one] == [("http://a", 1)]


def test_effective_settings_come_from_the_engine_log():
    log = (
        "(Worker pid=1) INFO [parallel_state.py:1906] world_size=2 rank=1 local_rank=0 "
        "distributed_init_method=tcp://127.0.0.1:29611 backend=gloo\n"
        "(Worker pid=1) INFO rank 1 in world size 2 is assigned as DP rank 0, PP rank 1, PCP rank 0, TP rank 0, "
        "ETP rank 0, EP rank N/A\n"
    )
    got = comm.effective(log)
    assert got["world_size"] == 2 and got["backends"] == ["gloo"]
    assert got["assignments"] == [{"rank": 1, "world_size": 2, "dp_rank": 0, "pp_rank": 1, "tp_rank": 0}]
    assert comm.comm_env({"NCCL_DEBUG": "WARN", "GLOO_SOCKET_IFNAME": "eth0", "HOME": "/root", BIND: "0|1"}) == {
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
        BIND: "0|1",
    }
    req = comm.requested(
        ["--data-parallel-size=2", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray"]
    )
    assert (req["world_size"], req["ranks_per_node"], req["distributed_executor_backend"]) == (4, 4, "ray")


def test_world_size_is_read_at_the_default_log_level():
    """vLLM logs the world_size/backend line at DEBUG: at INFO only the rank assignments show."""
    log = (
        "(Worker pid=1) INFO rank 0 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0\n"
        "(Worker pid=2) INFO rank 1 in world size 2 is assigned as DP rank 0, PP rank 1, TP rank 0, EP rank 0\n"
    )
    got = comm.effective(log)
    assert got["world_size"] == 2 and got["backends"] is None and "DEBUG" in got["source"]


class OrderedRuntime:
    """Records starts and health waits in order; every member is healthy when asked."""

    name = "ordered"

    def __init__(self):
        self.events: list[str] = []

    def start(self, spec: ServerSpec, run_dir, log_name="server.log"):
        events = self.events
        events.append(f"start {spec.port}")

        class Handle:
            log_path, image = Path(run_dir) / log_name, None

            def wait_healthy(self, timeout_s, progress=None):
                events.append(f"healthy {spec.port}")

            def alive(self):
                return True

            def stop(self, timeout_s=20.0):
                return 0
        return Handle()


@pytest.mark.parametrize(("gpus", "one_by_one"), [(((0,), (0,)), True), (((0,), (1,)), False)])
def test_replicas_sharing_a_gpu_start_one_after_another_each_healthy_first(gpus, one_by_one, tmp_path):
    from harness.backends.vllm import VllmBackend

    gpu_config = config(in_container=True, gpus=(0, 1))
    group = group_spec(VllmBackend(), gpu_config, Layout("replicas", 2, gpus=gpus), ports(), tmp_path)
    assert all(m.healthy_first == one_by_one for m in group.members)
    assert ("started one after another (they share GPU 0)" in group.description) == one_by_one
    runtime = OrderedRuntime()
    start_group(runtime, group, tmp_path, "dp")
    first, second = (m.spec.port for m in group.members)
    # vLLM sizes its KV cache from the device's free memory: a replica starting beside one still profiling
    # would count the other's allocations as its own
    assert runtime.events == ([f"start {first}", f"healthy {first}", f"start {second}"] if one_by_one
                              else [f"start {first}", f"start {second}"])
