"""MODEL= resolved offline: a checkpoint directory or an id in a local Hugging Face cache, identified by a digest
over its files (hashed once per file version), and what the bench's shapes must fit in the model's config."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.bench import bench_specs
from harness.bench.modelfit import fit_to_model
from harness.bench.planning import early_plan
from harness.errors import InvalidInput
from harness.models.identity import digest_of, model_context
from harness.models.resolve import LocalCheckpoint, resolve_checkpoint, resolve_model

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "vocab_size": 1000}
FILES = {"config.json": json.dumps(CONFIG), "model.safetensors": "weights", "tokenizer.json": "{}",
         "tokenizer_config.json": "{}"}


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def write_checkpoint(path: Path, files: dict[str, str] = FILES) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def hub_layout(hub: Path, model_id: str, revision: str = "0123abcd") -> Path:
    """The hub cache's layout: blobs named by content, a snapshot of symlinks into them, refs/main."""
    repo = hub / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, text in FILES.items():
        blob = repo / "blobs" / sha(text).removeprefix("sha256:")
        blob.write_text(text)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture(autouse=True)
def own_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "infkit-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


def test_a_directory_is_identified_by_every_file_it_serves(tmp_path):
    ckpt = write_checkpoint(tmp_path / "my-model")
    (ckpt / "README.md").write_text("not part of the identity")
    model = resolve_model(str(ckpt))
    assert isinstance(model, LocalCheckpoint) and model.path == ckpt and model.name == "my-model"
    assert model.checkpoint_sha256 == digest_of({n: sha(t) for n, t in FILES.items()})
    assert model.tokenizer_sha256 == sha("{}")
    entry = model.run_entry()
    assert entry["version"] == model.checkpoint_sha256 and entry["source"]["kind"] == "directory"
    assert sorted(entry["source"]["files"]) == sorted(FILES)


def test_each_file_is_hashed_once_until_it_changes(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m")
    first = resolve_checkpoint(str(ckpt))
    assert first is not None and sorted(first.origin["hashed_now"]) == sorted(FILES)
    again = resolve_checkpoint(str(ckpt))
    assert again is not None and again.origin["hashed_now"] == [] and again.checkpoint_sha256 == first.checkpoint_sha256
    (ckpt / "model.safetensors").write_text("other weights")
    changed = resolve_checkpoint(str(ckpt))
    assert changed is not None and changed.origin["hashed_now"] == ["model.safetensors"]
    assert changed.checkpoint_sha256 != first.checkpoint_sha256


def test_an_id_resolves_offline_to_its_snapshot_in_the_hub_cache(tmp_path):
    snapshot = hub_layout(tmp_path / "hub", "acme/tiny-qwen")
    model = resolve_model("acme/tiny-qwen", progress=lambda _: pytest.fail("nothing is prepared for a cached id"))
    assert model.path == snapshot and model.name == "acme/tiny-qwen"
    assert model.run_entry()["source"] == {**model.run_entry()["source"], "kind": "hf-cache", "id": "acme/tiny-qwen",
                                           "revision": "0123abcd"}
    assert model.checkpoint_sha256 == digest_of({n: sha(t) for n, t in FILES.items()})  # the blobs, not the links


def test_hf_home_is_the_fallback_when_no_hub_cache_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    snapshot = hub_layout(tmp_path / "hf-home" / "hub", "acme/tiny-qwen")
    assert resolve_model("acme/tiny-qwen").path == snapshot


def test_a_missing_id_names_where_it_looked(tmp_path):
    with pytest.raises(InvalidInput, match="not in the local Hugging Face cache") as exc:
        resolve_model("acme/absent")
    assert str(tmp_path / "hub" / "models--acme--absent") in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("drop", "expected"), [("config.json", "not a checkpoint (no config.json)"),
                                                ("model.safetensors", "no *.safetensors weights"),
                                                ("tokenizer.json", "checkpoint without a tokenizer")])
def test_an_incomplete_directory_is_refused(tmp_path, drop, expected):
    ckpt = write_checkpoint(tmp_path / "m", {k: v for k, v in FILES.items() if k != drop})
    with pytest.raises(InvalidInput, match=expected.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
        resolve_model(str(ckpt))


def test_a_catalog_name_is_left_to_the_preparer():
    assert resolve_checkpoint("smollm2-135m") is None


def test_the_context_comes_from_the_config(tmp_path):
    assert model_context(write_checkpoint(tmp_path / "m")) == (1024, "max_position_embeddings")
    nested = {"text_config": {"max_position_embeddings": 2048}}
    assert model_context(write_checkpoint(tmp_path / "n", {"config.json": json.dumps(nested)})) == (2048,
                                                                                                    "max_position_embeddings")


@dataclass(frozen=True)
class Named:
    name: str
    path: Path


def test_the_server_context_is_the_model_s_and_the_bench_shapes_are_held_to_it(tmp_path):
    spec = bench_specs()["69"]
    model = Named("m", write_checkpoint(tmp_path / "m"))
    fitted = fit_to_model(spec.config(prefix_tokens=256), model)
    assert fitted.max_model_len == 1024
    with pytest.raises(InvalidInput, match=r"prefix 1000 \+ suffix 32 \+ output 2 tokens = 1034 exceed "
                                           r"--max-model-len 1024: the model's context is 1024 tokens "
                                           r"\(max_position_embeddings in .*config.json\)"):
        fit_to_model(spec.config(prefix_tokens=1000), model)


def test_the_kv_cache_must_hold_one_full_context(tmp_path):
    big = {**CONFIG, "num_hidden_layers": 4000, "max_position_embeddings": 4096}
    model = Named("big", write_checkpoint(tmp_path / "big", {**FILES, "config.json": json.dumps(big)}))
    with pytest.raises(InvalidInput, match=r"--kv-cache-space-gib 1 holds 2097 tokens of big \(512000 bytes each\), "
                                           r"fewer than its context of 4096 tokens"):
        fit_to_model(bench_specs()["69"].config(kv_cache_space_gib=1), model)


def test_early_plan_checks_a_user_checkpoint_before_any_setup(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m")
    spec = bench_specs()["69"]
    early = early_plan(spec, spec.config(model=str(ckpt), prefix_tokens=128))
    assert early is not None and early[0].path == ckpt
    with pytest.raises(InvalidInput, match="checkpoint without a tokenizer"):
        os.remove(ckpt / "tokenizer.json")
        early_plan(spec, spec.config(model=str(ckpt)))


def test_a_chat_arm_is_planned_once_the_checkpoint_has_its_own_template(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m")
    spec = bench_specs()["69"]
    cfg = spec.config(model=str(ckpt), synthetic=False, sessions=1)
    with pytest.raises(InvalidInput, match="has no chat template"):
        early_plan(spec, cfg)
    (ckpt / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    early = early_plan(spec, cfg)
    assert early is not None and "chat_template.jinja" in early[0].run_entry()["source"]["files"]
