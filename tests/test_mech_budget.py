"""Iteration budget: published KV sizes, capacity arithmetic, the OOM boundary, invalid configurations."""

from __future__ import annotations

import math

import pytest

from harness.errors import InvalidInput
from harness.mech.budget import GIB, BudgetConfig, capacity, grid, oom_boundary, run
from harness.models.shapes import MODELS, ModelShape, get_model, kv_bytes_per_token


@pytest.mark.parametrize(("name", "expected_bytes"), [
    ("Llama-3-8B", 128 * 1024),          # 2 x 32 layers x 8 kv heads x 128 x 2 bytes
    ("Qwen3-30B-A3B", 96 * 1024),        # 2 x 48 x 4 x 128 x 2
    ("DeepSeek-V3", 61 * (512 + 64) * 2),  # MLA latent: 70272 bytes = 68.625 KiB
    ("SmolLM2-135M", 2 * 30 * 3 * 64 * 2),  # 22.5 KiB
    ("Llama-2-7B", 512 * 1024),          # MHA: 32 kv heads
    ("Falcon-7B", 2 * 32 * 1 * 64 * 2),  # MQA: one kv head
])
def test_published_kv_bytes_per_token_bf16(name: str, expected_bytes: int) -> None:
    assert kv_bytes_per_token(get_model(name), "bf16") == expected_bytes


def test_deepseek_v3_mla_is_about_68_6_kib() -> None:
    assert kv_bytes_per_token(get_model("DeepSeek-V3")) / 1024 == pytest.approx(68.6, abs=0.05)


def test_fp8_halves_and_fp16_equals_bf16() -> None:
    for model in MODELS.values():
        assert kv_bytes_per_token(model, "fp8") * 2 == kv_bytes_per_token(model, "bf16")
        assert kv_bytes_per_token(model, "fp16") == kv_bytes_per_token(model, "bf16")


def test_capacity_hand_computed() -> None:
    cfg = BudgetConfig(model="SmolLM2-135M", device_memory_gib=1.0, gpu_memory_utilization=0.5, block_size=16,
                       activation_bytes=10 * 2**20)
    cap = capacity(cfg, get_model("SmolLM2-135M"))
    usable = GIB // 2
    pool = usable - 134_515_008 * 2 - 10 * 2**20
    assert cap.kv_pool_bytes == pool
    assert cap.num_blocks == pool // (16 * 23040)
    assert cap.max_tokens == cap.num_blocks * 16


def test_oom_boundary_is_the_inflection_point() -> None:
    cfg = BudgetConfig(model="Llama-3-8B", device_memory_gib=24, batches=tuple(range(1, 65)), contexts=(1000, 4096))
    cap = capacity(cfg, get_model("Llama-3-8B"))
    rows = {(r["context"], r["batch"]): r for r in grid(cfg, cap)}
    for point in oom_boundary(cfg, cap):
        c, b = point["context"], point["max_batch"]
        assert b * math.ceil(c / 16) <= cap.num_blocks < (b + 1) * math.ceil(c / 16)
        if (c, b) in rows:
            assert rows[(c, b)]["fits"]
        if (c, b + 1) in rows:
            assert not rows[(c, b + 1)]["fits"]


def test_run_reports_grid_and_boundary() -> None:
    out = run(BudgetConfig())
    assert out.details["kv_bytes_per_token"] == 131072
    assert out.details["oom_boundary"][0]["context"] == 512
    assert out.model["version"].startswith("config:sha256:")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"device_memory_gib": -1}, "--device-memory-gib must be at least"),
    ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization must be at most 1"),
    ({"block_size": 0}, "--block-size must be at least 1"),
    ({"batches": (0, 2)}, "--batches must be at least 1"),
    ({"batches": ()}, "needs at least one value"),
    ({"activation_bytes": -5}, "--activation-bytes must be at least 0"),
    ({"kv_dtype": "int3"}, "--kv-dtype: 'int3' is not one of"),
    ({"model": "GPT-9"}, "unknown model"),
])
def test_invalid_configs(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        BudgetConfig(**kwargs)


def test_model_that_does_not_fit() -> None:
    with pytest.raises(InvalidInput, match="does not fit"):
        run(BudgetConfig(model="DeepSeek-V3"))


def test_budget_smaller_than_one_block() -> None:
    # weights leave room, but activations eat all but a few bytes of it
    cfg = BudgetConfig(model="SmolLM2-135M", device_memory_gib=0.3, gpu_memory_utilization=1.0,
                       activation_bytes=int(0.3 * GIB) - 134_515_008 * 2 - 100)
    with pytest.raises(InvalidInput, match="smaller than one block"):
        run(cfg)


def test_invalid_model_config_and_unknown_names() -> None:
    with pytest.raises(InvalidInput, match="num_layers"):
        ModelShape("x", "LlamaForCausalLM", "gqa", 0, 8, 8, 64, 512, 1024, 1000, 10)
    with pytest.raises(InvalidInput, match="multiple"):
        ModelShape("x", "LlamaForCausalLM", "gqa", 2, 9, 4, 64, 512, 1024, 1000, 10)
    with pytest.raises(InvalidInput, match="unknown model"):
        get_model("nope")
    with pytest.raises(InvalidInput, match="unknown dtype"):
        kv_bytes_per_token(get_model("Llama-3-8B"), "int3")
