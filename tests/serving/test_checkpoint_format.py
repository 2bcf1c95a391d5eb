"""Checkpoint files both transformers lines read alike: the normaliser on transformers 5.x's own output, and every
writer (stamp, draft) passing what it writes through it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from harness.ids import sha256_file
from harness.models.checkpoint_format import normalise_checkpoint, normalise_config, normalise_tokenizer_config
from harness.models.draft import ensure_draft
from harness.models.readers import differences
from harness.models.stamp import FORMAT_SHA256, STAMP_NAME, PreparedModel, write_stamp

# What transformers 5.19 writes for SmolLM2 (the prepared checkpoint's config.json and tokenizer_config.json).
CONFIG_5X = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16", "head_dim": 64,
    "hidden_size": 576, "max_position_embeddings": 8192, "num_attention_heads": 9, "num_hidden_layers": 30,
    "num_key_value_heads": 3, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True, "transformers_version": "5.19.0", "vocab_size": 49152,
}
TOKENIZER_CONFIG_5X = {
    "backend": "tokenizers", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "is_local": True,
    "local_files_only": True, "model_max_length": 1000000000000000019884624838656, "pad_token": "<|im_end|>",
    "tokenizer_class": "TokenizersBackend", "unk_token": "<|endoftext|>",
}


def test_the_5x_config_gains_the_top_level_rope_fields_4x_reads():
    out = normalise_config(CONFIG_5X)
    assert out["rope_theta"] == 100000.0  # 4.x would otherwise fall back to 10000
    assert out["rope_scaling"] is None  # the default RoPE: 4.x's "no scaling"
    assert out["rope_parameters"] == CONFIG_5X["rope_parameters"]  # what 5.x reads stays
    assert {k: v for k, v in out.items() if not k.startswith("rope_")} == {
        k: v for k, v in CONFIG_5X.items() if not k.startswith("rope_")}


def test_scaled_rope_keeps_its_parameters_for_4x():
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    out = normalise_config({**CONFIG_5X, "rope_parameters": params})
    assert out["rope_theta"] == 500000.0
    assert out["rope_scaling"] == {k: v for k, v in params.items() if k != "rope_theta"}


def test_a_4x_config_is_left_as_it_is():
    config_4x = {**{k: v for k, v in CONFIG_5X.items() if k != "rope_parameters"}, "rope_theta": 100000.0,
                 "rope_scaling": None}
    assert normalise_config(config_4x) == config_4x


def test_the_5x_tokenizer_class_becomes_one_both_lines_have():
    out = normalise_tokenizer_config(TOKENIZER_CONFIG_5X)
    assert out["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "is_local" not in out and "local_files_only" not in out
    assert out["eos_token"] == "<|im_end|>" and out["pad_token"] == "<|im_end|>"
    assert normalise_tokenizer_config({"tokenizer_class": "GPT2Tokenizer"}) == {"tokenizer_class": "GPT2Tokenizer"}


def write_5x_checkpoint(path: Path, layers: int = 30) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({**CONFIG_5X, "num_hidden_layers": layers}))
    (path / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG_5X))
    (path / "tokenizer.json").write_text('{"model": {}}')
    (path / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")  # a valid safetensors file, no tensors


def assert_4x_readable(path: Path) -> None:
    config = json.loads((path / "config.json").read_text())
    assert config["rope_theta"] == 100000.0 and config["rope_parameters"]["rope_theta"] == 100000.0
    assert json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_normalising_twice_changes_nothing_more(tmp_path):
    write_5x_checkpoint(tmp_path / "ckpt")
    assert normalise_checkpoint(tmp_path / "ckpt") == ["config.json", "tokenizer_config.json"]
    assert normalise_checkpoint(tmp_path / "ckpt") == []
    assert_4x_readable(tmp_path / "ckpt")


def test_the_stamp_writer_normalises_before_it_hashes(tmp_path):
    path = tmp_path / "ckpt"
    write_5x_checkpoint(path)
    stamp = write_stamp(path, {"key": "k", "name": "n", "gguf_sha256": ""})
    assert_4x_readable(path)
    assert stamp["files"]["config.json"] == sha256_file(path / "config.json")
    assert stamp["format_sha256"] == FORMAT_SHA256
    assert json.loads((path / STAMP_NAME).read_text()) == stamp


def test_a_draft_of_a_5x_target_is_4x_readable(tmp_path):
    path = tmp_path / "models" / "tiny-0123456789ab"
    write_5x_checkpoint(path, layers=4)
    target = PreparedModel(key="tiny", name="Tiny", path=path, gguf_sha256="", checkpoint_sha256="",
                           tokenizer_sha256="")
    draft = ensure_draft(target, 2, root=tmp_path, progress=lambda _m: None)
    assert_4x_readable(draft.path)
    assert json.loads((draft.path / "config.json").read_text())["num_hidden_layers"] == 2


def test_the_comparison_names_a_rope_base_the_engines_would_misread():
    read = {"ids": [1, 2], "special_tokens": {"eos_token": "<|im_end|>"}, "tokenizer_size": 49152,
            "chat_template": "t", "config": {"rope_theta": 100000.0, "num_attention_heads": 9}}
    engine = {**read, "config": {**read["config"], "rope_theta": 10000.0}}
    assert differences(engine, read) == ["config.rope_theta: 10000.0 != 100000.0"]
    assert differences(read, read) == []
    unreadable = {"error": "ValueError: Tokenizer class TokenizersBackend does not exist"}
    assert differences(unreadable, read) == ["engine transformers cannot read it: " + unreadable["error"]]
