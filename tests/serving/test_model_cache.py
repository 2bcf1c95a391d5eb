"""Model cache entries: a stamp that no longer matches its files is detected (no conversion needed)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.models import find_model
from harness.models.prepare import source_for
from harness.models.stamp import STAMP_NAME, from_stamp, hash_tree


def fake_entry(root):
    path = root / "models" / "smollm2-135m-0123456789ab"
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (path / "model.safetensors").write_bytes(b"\0" * 4096)
    (path / "tokenizer.json").write_text('{"model": {}}')
    files = hash_tree(path)
    (path / STAMP_NAME).write_text(json.dumps({
        "key": "smollm2-135m", "name": "SmolLM2-135M-Instruct", "gguf_sha256": "sha256:" + "1" * 64,
        "checkpoint_sha256": files["model.safetensors"], "tokenizer_sha256": files["tokenizer.json"], "files": files}))
    return path


def test_intact_entry_is_found_with_its_refs(tmp_path):
    path = fake_entry(tmp_path)
    model = find_model("smollm2-135m", root=tmp_path)
    assert model is not None and model.path == path
    assert model.model_ref == {"name": "SmolLM2-135M-Instruct", "version": sha256_file(path / "model.safetensors")}
    assert model.tokenizer_ref["version"] == sha256_file(path / "tokenizer.json")
    assert model.run_entry()["gguf_sha256"] == "sha256:" + "1" * 64


def test_a_newer_model_derived_from_it_is_not_taken_for_it(tmp_path):
    path = fake_entry(tmp_path)
    derived = tmp_path / "models" / "smollm2-135m-even-heads-0123456789ab"
    shutil.copytree(path, derived)
    stamp = json.loads((derived / STAMP_NAME).read_text())
    (derived / STAMP_NAME).write_text(json.dumps({**stamp, "key": "smollm2-135m-even-heads"}))
    os.utime(derived, (time.time() + 60, time.time() + 60))  # the newest entry under the glob
    assert find_model("smollm2-135m", root=tmp_path).path == path


def test_corrupt_file_fails_verification(tmp_path):
    path = fake_entry(tmp_path)
    with (path / "model.safetensors").open("r+b") as fh:
        fh.seek(100)
        fh.write(b"\1")
    assert from_stamp(path, verify=False) is not None  # sizes and names alone do not catch it
    assert from_stamp(path, verify=True) is None


def test_missing_file_or_stamp_is_partial(tmp_path):
    path = fake_entry(tmp_path)
    (path / "tokenizer.json").unlink()
    assert from_stamp(path, verify=False) is None
    assert find_model("smollm2-135m", root=tmp_path) is None


def test_unknown_model_lists_the_catalog():
    with pytest.raises(InvalidInput, match="smollm2-135m"):
        source_for("llama-70b")
