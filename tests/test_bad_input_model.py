"""A model the user names that cannot be served: a one-line error before any setup (no serving venv built, no
server started, no run folder), nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256}


def checkpoint(path: Path, *, config: bool = True, tokenizer: bool = True) -> Path:
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"\0" * 16)
    if config:
        (path / "config.json").write_text(json.dumps(CONFIG))
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


CASES = {
    "not-a-checkpoint": (lambda d: checkpoint(d / "m", config=False), "not a checkpoint (no config.json)"),
    "no-tokenizer": (lambda d: checkpoint(d / "m", tokenizer=False), "checkpoint without a tokenizer"),
    "no-such-directory": (lambda d: d / "absent", "no such directory"),
    "context-too-short": (lambda d: checkpoint(d / "m"), "exceed --max-model-len 256: the model's context is 256 "
                                                         "tokens (max_position_embeddings in"),
    "id-not-in-the-cache": (lambda d: "acme/absent", "not in the local Hugging Face cache (looked in "),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bench_refuses_a_model_it_cannot_serve_before_any_setup(tmp_path, case):
    make, expected = CASES[case]
    model = make(tmp_path)
    cache = tmp_path / "infkit-cache"
    proc = infkit("bench", "69", "--model", str(model), "--prefix-tokens", "512", cwd=tmp_path,
                  env={"INFKIT_CACHE": str(cache), "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert_clean_error(proc, expected)
    assert_nothing_left(tmp_path / "runs", tmp_path / "manifests", cache / "venvs", cache / "models")


def test_a_chat_arm_needs_the_checkpoint_s_own_chat_template(tmp_path):
    model = checkpoint(tmp_path / "m")
    (model / "config.json").write_text(json.dumps({**CONFIG, "max_position_embeddings": 1024}))
    cache = tmp_path / "infkit-cache"
    proc = infkit("bench", "69", "--model", str(model), "--no-synthetic", "--sessions", "1", cwd=tmp_path,
                  env={"INFKIT_CACHE": str(cache)})
    assert_clean_error(proc, "arm sessions-fresh/cache-on sends chat requests, but", "has no chat template")
    assert_nothing_left(tmp_path / "runs", tmp_path / "manifests", cache / "venvs")
