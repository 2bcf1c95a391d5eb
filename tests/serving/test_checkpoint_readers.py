"""Every checkpoint the kit serves reads the same with the GPU engines' transformers (4.57.1, its own cached venv) as
on the CPU path (the serving venv's 5.x): tokenizer ids, special tokens, chat template, RoPE base, heads, context
(slow: the two venvs; .ci/setup-transformers4.sh builds the 4.57.1 one)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.errors import InfkitError
from harness.models import ensure_model
from harness.models.draft import ensure_draft
from harness.models.readers import check_checkpoints, engine_reader_python
from harness.models.resolve import resolve_checkpoint
from harness.runtime.serving_env import ensure_serving_env
from tests.conftest import require_or_skip
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.serverless]

DRAFT_LAYERS = 10  # bench-68's draft-model arm
SMOLLM2_ROPE_THETA = 100000.0


@pytest.fixture(scope="module")
def pythons() -> tuple[Path, Path]:
    try:
        engine = engine_reader_python(progress=lambda line: print(line, flush=True))
        cpu = ensure_serving_env(progress=lambda line: print(line, flush=True)).python
    except InfkitError as exc:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"the transformers 4.57.1 or the serving venv cannot be built: {exc}")
    return engine, cpu


def user_checkpoint(prepared: Path, path: Path) -> Path:
    """A checkpoint as a user brings it from a hub download: config and tokenizer config as transformers 4.x writes
    them (top-level ``rope_theta``, ``torch_dtype``, ``GPT2Tokenizer``), the weights beside them."""
    path.mkdir()
    for name in ("tokenizer.json", "generation_config.json"):
        shutil.copyfile(prepared / name, path / name)
    os.symlink(prepared / "model.safetensors", path / "model.safetensors")
    config = json.loads((prepared / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("rope_parameters", "dtype")}
    (path / "config.json").write_text(json.dumps({**config, "rope_theta": SMOLLM2_ROPE_THETA, "rope_scaling": None,
                                                  "torch_dtype": "bfloat16", "transformers_version": "4.42.3"}))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>", "model_max_length": 8192,
        "clean_up_tokenization_spaces": False, "chat_template": (prepared / "chat_template.jinja").read_text()}))
    return path


def test_every_served_checkpoint_reads_the_same_with_the_engines_transformers(pythons, tmp_path):
    engine_python, cpu_python = pythons
    prepared = prepared_model_or_skip()
    served = {
        "prepared": prepared.path,
        "derived even-heads": ensure_model("smollm2-135m-even-heads", progress=print).path,
        f"draft {DRAFT_LAYERS}L": ensure_draft(prepared, DRAFT_LAYERS, progress=print).path,
        "user checkpoint": resolve_checkpoint(str(user_checkpoint(prepared.path, tmp_path / "user")),
                                              cache_dir=tmp_path / "identity").path,  # as MODEL=DIR serves it
    }
    checked = check_checkpoints(list(served.values()), engine_python=engine_python, cpu_python=cpu_python)
    for label, directory in served.items():
        diffs, engine, cpu = checked[directory]
        assert diffs == [], f"{label} ({directory}) reads differently: {diffs}"
        assert engine["transformers"] == "4.57.1" and cpu["transformers"].startswith("5.")
        assert engine["config"]["rope_theta"] == SMOLLM2_ROPE_THETA, label
        assert engine["config"]["max_position_embeddings"] == 8192 and len(engine["ids"]) > 20, label
    heads = {label: (checked[d][1]["config"]["num_attention_heads"], checked[d][1]["config"]["num_key_value_heads"])
             for label, d in served.items()}
    assert heads["prepared"] == (9, 3) and heads["derived even-heads"] == (8, 2)
    assert checked[served[f"draft {DRAFT_LAYERS}L"]][1]["config"]["num_hidden_layers"] == DRAFT_LAYERS
