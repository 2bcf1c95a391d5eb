"""Core reservation: on 4+ cores the engine's threads leave the lowest core to the client and the API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.backends import BackendConfig, cpu_placement
from harness.backends import vllm_cpu as vllm_cpu_module
from harness.backends.cpu_placement import BIND, engine_ranks, physical_cores, placement, topology
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.bench.benches.bench81.parallel import cores
from harness.runtime.serving_env import VLLM_CPU, ServingEnv


def own_cores(cores) -> dict[int, tuple[int, int, int]]:
    """Every logical CPU a physical core of its own, all on NUMA node 0."""
    return {c: (0, 0, c) for c in cores}


def test_four_cores_or_more_reserve_the_lowest_for_the_client():
    env, record = placement({}, {}, (2, 3, 4, 5, 7), topo=own_cores((2, 3, 4, 5, 7)))
    assert env == {BIND: "3-5,7"}
    assert record["reserved_cores"] == [2] and record["engine_bind"] == "3-5,7" and record["source"] == "infkit"
    assert record["host_cores"] == [2, 3, 4, 5, 7] and "core 2 left to the client" in record["note"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_small_hosts_reserve_nothing_and_say_so(n: int):
    env, record = placement({}, {}, tuple(range(n)), topo=own_cores(range(n)))
    assert env == {} and record["reserved_cores"] == [] and record["engine_bind"] is None
    assert record["source"] == "vllm auto" and f"{n} usable cores" in record["note"]


def test_a_given_binding_wins_from_the_settings_or_the_environment():
    env, record = placement({BIND: "0-1"}, {BIND: "5"}, range(8))
    assert env == {} and record["engine_bind"] == "0-1" and record["source"] == "server settings"
    env, record = placement({}, {BIND: "5"}, range(8))
    assert env == {} and record["engine_bind"] == "5" and record["source"] == "environment"


def test_several_engine_ranks_keep_vllms_binding():
    assert engine_ranks(("--tensor-parallel-size", "2", "--pipeline-parallel-size=2")) == 4
    assert engine_ranks(("--max-num-seqs", "8")) == 1
    env, record = placement({}, {}, range(8), ("--data-parallel-size", "2"), topo=own_cores(range(8)))
    assert env == {} and "2 engine ranks" in record["note"]


def test_smt_siblings_and_other_numa_nodes_are_left_out_as_vllms_auto_binding_does():
    # 2 nodes x 4 physical cores x 2 threads: cpu c and c + 8 are siblings; cores 0-3 on node 0, 4-7 on node 1
    topo = {c: (int(c % 8 >= 4), 0, c % 8) for c in range(16)}
    assert physical_cores(range(16), topo) == (0, 1, 2, 3)
    env, record = placement({}, {}, range(16), topo=topo)
    assert env == {BIND: "1-3"} and record["reserved_cores"] == [0]
    two = {c: (0, 0, c % 2) for c in range(4)}  # 2 physical cores, 4 logical CPUs: the engine needs both
    assert placement({}, {}, range(4), topo=two)[0] == {}


def test_topology_reads_sysfs(tmp_path: Path):
    for cpu, core in ((0, 0), (1, 0)):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "node1").mkdir()
        (tmp_path / f"cpu{cpu}" / "topology" / "core_id").write_text(f"{core}\n")
        (tmp_path / f"cpu{cpu}" / "topology" / "physical_package_id").write_text("0\n")
    assert topology((0, 1, 5), tmp_path) == {0: (1, 0, 0), 1: (1, 0, 0), 5: (0, 0, 5)}


def spec_on(monkeypatch, allowed: tuple[int, ...], **kw):
    monkeypatch.setattr(vllm_cpu_module, "allowed_cores", lambda: allowed)
    monkeypatch.setattr(cpu_placement, "topology", own_cores)
    monkeypatch.delenv(BIND, raising=False)
    env = ServingEnv(path=Path("/cache/venvs/vllm-cpu-x"), spec=VLLM_CPU)
    return VllmCpuBackend(env).server_spec(BackendConfig(model_dir="/m", served_model_name="m", port=8000, **kw))


def test_the_vllm_cpu_spec_binds_and_records_the_placement(monkeypatch):
    spec = spec_on(monkeypatch, (0, 1, 2, 3))
    assert spec.env[BIND] == "1-3" and spec.placement["reserved_cores"] == [0]
    small = spec_on(monkeypatch, (0, 1))
    assert BIND not in small.env and small.placement["reserved_cores"] == []
    # a BIND in this environment reaches a local server, not a container (it inherits nothing from here)
    monkeypatch.setattr(vllm_cpu_module, "allowed_cores", lambda: (0, 1, 2, 3))
    monkeypatch.setattr(cpu_placement, "topology", own_cores)
    monkeypatch.setenv(BIND, "2")
    backend = VllmCpuBackend(ServingEnv(path=Path("/v"), spec=VLLM_CPU))
    local = backend.server_spec(BackendConfig(model_dir="/m", served_model_name="m", port=8000))
    boxed = backend.server_spec(BackendConfig(model_dir="/m", served_model_name="m", port=8000, in_container=True))
    assert local.placement["source"] == "environment" and BIND not in local.env
    assert boxed.placement["source"] == "infkit" and boxed.env[BIND] == "1-3"


def test_bench81s_own_binding_wins(monkeypatch):
    spec = spec_on(monkeypatch, tuple(range(8)), extra_env=dict(cores(1, cpu=True)[0]))
    assert spec.env[BIND] == "0" and spec.placement["source"] == "server settings"
