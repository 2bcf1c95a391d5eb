"""Attention: agreement with float64, the kernel path that ran, recorded fallbacks."""

from __future__ import annotations

import json

from harness.cuda import attention
from harness.cuda.attention import dispatched_ops, explicit_attention, kernel_path


def test_explicit_attention_matches_sdpa_and_masks(torch):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    ours = explicit_attention(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(ours, ref, atol=1e-12)
    # position 0 may only attend to itself
    assert torch.equal(ours[..., 0, :], v[..., 0, :])


def test_kernel_path_names():
    assert kernel_path(["_scaled_dot_product_flash_attention_for_cpu"]) == "flash_cpu"
    assert kernel_path(["_scaled_dot_product_efficient_attention"]) == "efficient"
    assert kernel_path(["_scaled_dot_product_cudnn_attention"]) == "cudnn"
    assert kernel_path(["mul", "bmm", "_safe_softmax", "bmm"]) == "math"
    assert kernel_path(["add"]) == "unknown"


def test_dispatched_ops_see_the_forced_math_path(torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 8, 4)

    def forced_math():
        with sdpa_kernel([SDPBackend.MATH]):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    assert kernel_path(dispatched_ops(forced_math)) == "math"


def test_cpu_run_records_paths_and_fallbacks(run_cuda, valid, torch):
    out = run_cuda("attention", batch=1, heads=2, seq_len=64, head_dim=16, iters=3, warmup=1)
    valid(out.run_dir / "result.json")
    valid(out.run_dir / "run.json")
    variants = {v["variant"]: v for v in out.result["details"]["variants"]}
    assert variants["explicit"]["kernel"] == "explicit"
    assert variants["sdpa:math"]["kernel"] == "math"
    assert variants["sdpa:auto"]["kernel"] == "flash_cpu"
    for name in ("sdpa:efficient", "sdpa:cudnn"):
        assert variants[name]["ran"] is False
        assert name.split(":")[1] in variants[name]["fallback_reason"]
    ran = [v for v in variants.values() if v["ran"]]
    assert all(v["max_abs_diff"] <= 1e-4 and v["latency_ms"]["n"] == 3 for v in ran)
    assert all(v["peak_memory_bytes"] > 0 for v in ran)
    assert out.result["correctness"]["quality"]["passed"] is True
    lines = (out.run_dir / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["variant"] for line in lines] == [v["variant"] for v in ran]


def test_disagreement_blocks_the_decision(run_cuda, valid, monkeypatch):
    monkeypatch.setitem(attention.TOLERANCE, "float32", 0.0)
    out = run_cuda("attention", batch=1, heads=1, seq_len=32, head_dim=8, iters=1, warmup=0, backends=("math",))
    valid(out.run_dir / "result.json")
    conclusion = out.result["conclusion"]
    assert conclusion["failure"]["kind"] == "correctness" and conclusion["decision"] == "blocked"
    assert out.result["correctness"]["quality"]["passed"] is False
