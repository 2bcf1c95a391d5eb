"""Dispatch: eager vs torch.compile agreement, skipped modes and compiler failures as recorded fallbacks."""

from __future__ import annotations

import pytest

from harness.cuda.dispatch import make_block, skip_reason


def test_block_is_a_real_decoder_layer(torch):
    block, config = make_block("tiny", seed=0, device="cpu", dtype="float32")
    x = torch.randn(2, 5, config.hidden_size)
    with torch.no_grad():
        y = block(x)
        # causal: the first position's output ignores every later token
        x2 = x.clone()
        x2[:, 1:] += 1.0
        assert torch.allclose(block(x2)[:, 0], y[:, 0], atol=1e-6)
    assert y.shape == x.shape and not torch.allclose(y, x)


def test_skip_reasons_on_cpu():
    assert "CUDA graphs" in skip_reason("reduce-overhead", "cpu", False)
    assert "--cpu-autotune" in skip_reason("max-autotune", "cpu", False)
    assert skip_reason("max-autotune", "cpu", True) is None
    assert skip_reason("default", "cpu", False) is None
    assert skip_reason("reduce-overhead", "cuda", False) is None


def test_compiler_failure_is_recorded_as_eager_fallback(run_cuda, valid, torch, monkeypatch):
    def broken(*_a, **_k):
        raise RuntimeError("backend compiler failed: no C++ compiler found")

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr("harness.cuda.dispatch._graph_breaks", lambda *_a: None)
    out = run_cuda("dispatch", arch="tiny", batch=1, seq_len=8, iters=2, warmup=1, modes=("eager", "default"))
    valid(out.run_dir / "result.json")
    modes = {m["mode"]: m for m in out.result["details"]["modes"]}
    assert modes["eager"]["ran"] and modes["eager"]["max_abs_diff_vs_eager"] == 0.0
    assert modes["default"] == {"mode": "default", "requested": "default", "ran": False, "path": "eager-fallback",
                                "fallback_reason": "RuntimeError: backend compiler failed: no C++ compiler found"}
    assert out.result["details"]["fallback_count"] == 1


@pytest.mark.slow
@pytest.mark.serverless
def test_compiled_block_agrees_with_eager(run_cuda, valid):
    out = run_cuda("dispatch", arch="tiny", batch=1, seq_len=16, iters=3, warmup=1, modes=("eager", "default"))
    valid(out.run_dir / "result.json")
    modes = {m["mode"]: m for m in out.result["details"]["modes"]}
    compiled = modes["default"]
    assert compiled["ran"] and compiled["path"] == "inductor" and compiled["agrees"]
    assert compiled["first_call_ms"] > compiled["latency_ms"]["p50"]  # compile time is kept out of steady state
    assert out.result["details"]["dynamo"]["graph_count"] >= 1
    assert modes["max-autotune"]["ran"] is False if "max-autotune" in modes else True
