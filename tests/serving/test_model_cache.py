"""Model cache entries: found and verified from their stamp alone (no venv), brought to the current checkpoint
format in place, and a stamp that no longer matches its files is detected (no conversion needed)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.models import ensure_model, find_model, prepare
from harness.models.derived import DERIVED, recipe_digest
from harness.models.prepare import CATALOG, CONVERTER_ENV, model_dir, source_for
from harness.models.stamp import FORMAT_SHA256, STAMP_NAME, from_stamp, hash_tree, write_stamp
from harness.runtime import serving_env
from tests.serving.test_checkpoint_format import CONFIG_5X, TOKENIZER_CONFIG_5X

PINNED_GGUF = CATALOG["smollm2-135m"].gguf_sha256


def fake_entry(root, path=None, key="smollm2-135m"):
    """A stamped entry as the writers left it before checkpoints were normalised (no ``format_sha256``)."""
    path = path or model_dir(source_for(key), root)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG_5X))
    (path / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG_5X))
    (path / "model.safetensors").write_bytes(b"\0" * 4096)
    (path / "tokenizer.json").write_text('{"model": {}}')
    files = hash_tree(path)
    (path / STAMP_NAME).write_text(json.dumps({
        "key": key, "name": "SmolLM2-135M-Instruct", "gguf_sha256": PINNED_GGUF,
        "checkpoint_sha256": files["model.safetensors"], "tokenizer_sha256": files["tokenizer.json"], "files": files}))
    return path


@pytest.fixture
def no_venv(monkeypatch, tmp_path):
    """No venv can be had: the cache the venvs live in is elsewhere and empty, and any build fails the test."""
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "elsewhere"))

    def refuse(*args, **kwargs):
        pytest.fail("a venv was built or looked up for a model already in the cache")

    monkeypatch.setattr(serving_env, "_build", refuse)
    monkeypatch.setattr(prepare, "ensure_serving_env", refuse)


def test_a_cached_model_is_found_and_verified_without_any_venv(tmp_path, no_venv):
    path = fake_entry(tmp_path)
    assert find_model("smollm2-135m", root=tmp_path).path == path
    model = ensure_model("smollm2-135m", root=tmp_path, progress=pytest.fail)
    assert model.path == path and model.gguf_sha256 == PINNED_GGUF


def test_a_cached_derived_model_needs_no_venv_either(tmp_path, no_venv):
    fake_entry(tmp_path)
    base = ensure_model("smollm2-135m", root=tmp_path, progress=pytest.fail)
    source = DERIVED["smollm2-135m-even-heads"]
    fake_entry(tmp_path, tmp_path / "models" / f"{source.key}-{recipe_digest(source, base.checkpoint_sha256)}",
               key=source.key)
    assert ensure_model(source.key, root=tmp_path, progress=pytest.fail).key == source.key
    assert find_model(source.key, root=tmp_path).key == source.key


class Asked(Exception):
    pass


def test_a_missing_model_is_made_in_the_converter_venv_not_the_serving_one(tmp_path, monkeypatch):
    def asked(spec, **kwargs):
        raise Asked(spec)

    monkeypatch.setattr(prepare, "ensure_serving_env", asked)
    with pytest.raises(Asked) as raised:
        ensure_model("smollm2-135m", root=tmp_path, progress=lambda _m: None)
    assert raised.value.args == (CONVERTER_ENV,)
    assert not any("vllm" in pin for pin in CONVERTER_ENV.install + CONVERTER_ENV.extra)


def test_an_entry_of_the_old_format_is_normalised_in_place_keeping_its_versions(tmp_path):
    path = fake_entry(tmp_path)
    before = json.loads((path / STAMP_NAME).read_text())
    model = find_model("smollm2-135m", root=tmp_path)
    assert json.loads((path / "config.json").read_text())["rope_theta"] == 100000.0
    assert json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    after = json.loads((path / STAMP_NAME).read_text())
    assert after["format_sha256"] == FORMAT_SHA256 and after["files"] == hash_tree(path)
    assert (model.checkpoint_sha256, model.tokenizer_sha256) == (before["checkpoint_sha256"],
                                                                  before["tokenizer_sha256"])
    assert from_stamp(path, verify=True) == model


def test_a_current_entry_is_left_untouched(tmp_path):
    path = fake_entry(tmp_path)
    write_stamp(path, json.loads((path / STAMP_NAME).read_text()))
    stamp_mtime = (path / STAMP_NAME).stat().st_mtime_ns
    assert find_model("smollm2-135m", root=tmp_path) is not None
    assert (path / STAMP_NAME).stat().st_mtime_ns == stamp_mtime


def test_intact_entry_is_found_with_its_refs(tmp_path):
    path = fake_entry(tmp_path)
    model = find_model("smollm2-135m", root=tmp_path)
    assert model is not None and model.path == path
    assert model.model_ref == {"name": "SmolLM2-135M-Instruct", "version": sha256_file(path / "model.safetensors")}
    assert model.tokenizer_ref["version"] == sha256_file(path / "tokenizer.json")
    assert model.run_entry()["gguf_sha256"] == PINNED_GGUF


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
