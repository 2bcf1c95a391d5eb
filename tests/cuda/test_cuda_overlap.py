"""Overlap: a capability precheck on CPU, a measured run on a GPU."""

from __future__ import annotations

import pytest


def test_cpu_reports_capability_missing_precheck(run_cuda, valid):
    out = run_cuda("overlap", device="cpu")
    valid(out.run_dir / "result.json")
    valid(out.run_dir / "run.json")
    c = out.result["conclusion"]
    assert c["evidence_level"] == "precheck" and c["decision"] == "blocked"
    assert c["failure"]["kind"] == "capability_missing" and c["failure"]["stage"] == "precheck"


@pytest.mark.gpu
def test_gpu_overlap_is_correct_and_measured(run_cuda, valid, cuda):
    out = run_cuda("overlap", device="cuda", chunks=4, rows=2048, hidden=1024, iters=5, warmup=2)
    valid(out.run_dir / "result.json")
    d = out.result["details"]
    assert d["outputs_identical"] is True
    assert set(d["series"]) == {"serial", "overlapped", "transfer_only", "compute_only"}
    assert d["series"]["serial"]["clock"] == "cuda_event"
    assert d["exposed_transfer_ms"]["p50"] >= 0


@pytest.mark.gpu
def test_gpu_attention_and_budget_run(run_cuda, valid, cuda):
    att = run_cuda("attention", device="cuda", batch=1, heads=4, seq_len=256, head_dim=64, iters=5)
    valid(att.run_dir / "result.json")
    assert att.result["correctness"]["quality"]["passed"] is True
    bud = run_cuda("budget", device="cuda", arch="tiny", batches=(1, 2), contexts=(64, 128), iters=3)
    valid(bud.run_dir / "result.json")
    assert bud.result["details"]["kv_bytes_match_formula"] is True
