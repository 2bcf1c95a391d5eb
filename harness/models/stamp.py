"""A prepared checkpoint and its stamp: the hashes that version it, written once when it is made.

``prepare`` (GGUF → checkpoint) and ``derived`` (a recipe over a base checkpoint) both write a stamp
and read it back through here; neither reaches into the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.ids import sha256_bytes, sha256_file

STAMP_NAME = ".infkit-model.json"


@dataclass(frozen=True)
class PreparedModel:
    """A ready checkpoint directory (config.json, *.safetensors, tokenizer.json) and its hashes."""

    key: str
    name: str
    path: Path
    gguf_sha256: str
    checkpoint_sha256: str
    tokenizer_sha256: str
    derived: dict | None = None  # a derived model's recipe (harness.models.derived): base, overrides, seed, weights

    @property
    def model_ref(self) -> dict[str, str]:
        return {"name": self.name, "version": self.checkpoint_sha256}

    @property
    def tokenizer_ref(self) -> dict[str, str]:
        return {"name": self.name, "version": self.tokenizer_sha256}

    def run_entry(self) -> dict[str, str]:
        """The ``model`` entry of run.json: checkpoint version plus the GGUF (or the recipe) it came from."""
        if self.derived is not None:
            return {**self.model_ref, "derived": self.derived}
        return {**self.model_ref, "gguf_sha256": self.gguf_sha256}


def hash_tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (but the stamp) by relative path: its sha256."""
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != STAMP_NAME}


def checkpoint_digest(files: dict[str, str]) -> str:
    """The checkpoint's version: its one weights file's sha256, or a digest over every weights file."""
    weights = sorted((k, v) for k, v in files.items() if k.endswith(".safetensors"))
    if len(weights) == 1:
        return weights[0][1]
    return sha256_bytes("\n".join(f"{k} {v}" for k, v in weights).encode())


def from_stamp(path: Path, verify: bool) -> PreparedModel | None:
    """The prepared model if the stamp is present and every recorded file still matches it."""
    try:
        stamp = json.loads((path / STAMP_NAME).read_text())
        files: dict[str, str] = stamp["files"]
        if verify:
            if hash_tree(path) != files:
                return None
        elif not all((path / name).is_file() for name in files):
            return None
        return PreparedModel(key=stamp["key"], name=stamp["name"], path=path, gguf_sha256=stamp["gguf_sha256"],
                             checkpoint_sha256=stamp["checkpoint_sha256"], tokenizer_sha256=stamp["tokenizer_sha256"],
                             derived=stamp.get("derived"))
    except (OSError, ValueError, KeyError):
        return None
