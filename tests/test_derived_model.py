"""The derived even-heads model: SmolLM2's config with 8/2 heads and random weights, reproducible to the byte (slow)."""

from __future__ import annotations

import json

import pytest

from harness.models.derived import DERIVED, derive
from harness.runtime.serving_env import find_serving_env
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.serverless]


def test_the_same_recipe_gives_the_same_checkpoint_and_the_stamp_says_random(tmp_path):
    base = prepared_model_or_skip()
    env = find_serving_env()
    source = DERIVED["smollm2-135m-even-heads"]
    first = derive(env, source, base.path, tmp_path / "a", progress=lambda line: None)
    second = derive(env, source, base.path, tmp_path / "b", progress=lambda line: None)
    assert first["checkpoint_sha256"] == second["checkpoint_sha256"] != base.checkpoint_sha256
    assert first["tokenizer_sha256"] == base.tokenizer_sha256  # same tokenizer: the same workloads
    assert first["derived"]["weights"] == "random" and first["derived"]["seed"] == 0
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (8, 2, 64)
    assert config["num_attention_heads"] % 2 == 0 and config["num_key_value_heads"] % 2 == 0
    assert not list(tmp_path.glob("*.partial-*"))
