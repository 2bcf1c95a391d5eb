"""The truncated draft checkpoint: tensors of layers >= N dropped, every other byte copied, reproducible."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.models.draft import (
    draft_dir,
    ensure_draft,
    filter_safetensors,
    read_header,
    truncate_checkpoint,
)
from harness.models.stamp import STAMP_NAME, PreparedModel

LAYERS = 3


def write_safetensors(path: Path, tensors: dict[str, bytes]) -> None:
    """A safetensors file as the format defines it: u64 header length, JSON header, raw bytes (BF16, 1-D)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [len(data) // 2], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(tensors.values()))


def tensors() -> dict[str, bytes]:
    out = {"model.embed_tokens.weight": bytes(range(16)), "model.norm.weight": b"\x01\x02" * 3}
    for i in range(LAYERS):
        out[f"model.layers.{i}.mlp.down_proj.weight"] = bytes([i + 1]) * (8 + 2 * i)
        out[f"model.layers.{i}.input_layernorm.weight"] = bytes([0x40 + i]) * 4
    return out


@pytest.fixture
def target(tmp_path) -> PreparedModel:
    path = tmp_path / "models" / "tiny-0123456789ab"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"num_hidden_layers": LAYERS, "hidden_size": 8}))
    (path / "tokenizer.json").write_text('{"model": {}}')
    (path / "generation_config.json").write_text("{}")
    (path / STAMP_NAME).write_text("{}")
    write_safetensors(path / "model.safetensors", tensors())
    return PreparedModel(key="tiny", name="Tiny", path=path, gguf_sha256="sha256:" + "1" * 64,
                         checkpoint_sha256=sha256_file(path / "model.safetensors"),
                         tokenizer_sha256=sha256_file(path / "tokenizer.json"))


def tensor_bytes(path: Path) -> dict[str, bytes]:
    header, start = read_header(path)
    raw = path.read_bytes()
    return {n: raw[start + h["data_offsets"][0]:start + h["data_offsets"][1]] for n, h in header.items()
            if n != "__metadata__"}


def test_truncation_keeps_the_first_layers_and_every_shared_tensor_byte_for_byte(target, tmp_path):
    out = tmp_path / "draft"
    truncate_checkpoint(target.path, out, 2)
    kept = tensor_bytes(out / "model.safetensors")
    want = {k: v for k, v in tensors().items() if not k.startswith("model.layers.2.")}
    assert kept == want
    header, start = read_header(out / "model.safetensors")
    assert start % 8 == 0 and header["__metadata__"] == {"format": "pt"}
    assert header["model.layers.1.mlp.down_proj.weight"]["shape"] == [5]
    assert json.loads((out / "config.json").read_text()) == {"num_hidden_layers": 2, "hidden_size": 8}
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                    "tokenizer.json"]  # the target's stamp is not copied
    again = tmp_path / "again"
    truncate_checkpoint(target.path, again, 2)
    assert sha256_file(again / "model.safetensors") == sha256_file(out / "model.safetensors")


def test_filter_keeps_what_the_predicate_accepts(tmp_path):
    src = tmp_path / "a.safetensors"
    write_safetensors(src, {"x": b"ab", "y": b"cdef"})
    assert filter_safetensors(src, tmp_path / "b.safetensors", lambda n: n == "y") == ["y"]
    assert tensor_bytes(tmp_path / "b.safetensors") == {"y": b"cdef"}


@pytest.mark.parametrize("layers", [0, LAYERS, LAYERS + 1])
def test_a_draft_as_deep_as_the_target_is_refused_before_anything_is_written(target, tmp_path, layers):
    with pytest.raises(InvalidInput, match=f"draft layers must be between 1 and {LAYERS - 1}"):
        truncate_checkpoint(target.path, tmp_path / "draft", layers)
    assert not (tmp_path / "draft").exists()
    with pytest.raises(InvalidInput, match="draft layers must be between"):
        ensure_draft(target, layers, root=tmp_path / "cache", progress=pytest.fail)  # refused before any message
    assert not (tmp_path / "cache").exists()


def test_ensure_draft_stamps_hashes_and_rebuilds_a_corrupt_entry(target, tmp_path):
    root = tmp_path / "cache"
    draft = ensure_draft(target, 1, root=root, progress=lambda _m: None)
    assert draft.path == draft_dir(target, 1, root) and draft.path.parent.name == "drafts"
    assert draft.checkpoint_sha256 == sha256_file(draft.path / "model.safetensors")
    assert draft.tokenizer_sha256 == target.tokenizer_sha256
    stamp = json.loads((draft.path / STAMP_NAME).read_text())
    assert stamp["layers"] == 1 and stamp["source_checkpoint_sha256"] == target.checkpoint_sha256
    assert ensure_draft(target, 1, root=root, progress=lambda _m: None) == draft  # reused as it is
    (draft.path / "model.safetensors").write_bytes(b"corrupt")
    messages: list[str] = []
    rebuilt = ensure_draft(target, 1, root=root, progress=messages.append)
    assert rebuilt == draft and any("partial or corrupt" in m for m in messages)
