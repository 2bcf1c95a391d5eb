"""A prepared checkpoint and its stamp: the hashes that version it, written once when it is made.

``prepare`` (GGUF → checkpoint), ``derived`` (a recipe over a base checkpoint) and ``draft`` (the first
layers of a target) write their stamp through ``write_stamp`` and read it back through ``ready``;
none reaches into another. ``write_stamp`` first normalises the checkpoint so both transformers lines
read it alike (``checkpoint_format``) and records that normaliser's sha256 as ``format_sha256``; an
entry stamped under another normaliser is normalised in place by ``ready`` (config and tokenizer
config only: the weights, the tokenizer and so the model's versions stay as they are), so an older
cache entry is brought up to date without its venv, converter or any download.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_json
from harness.ids import sha256_bytes, sha256_file
from harness.models.checkpoint_format import normalise_checkpoint
from harness.runtime.serving_env import file_lock

STAMP_NAME = ".infkit-model.json"
FORMAT_SHA256 = sha256_file(Path(__file__).with_name("checkpoint_format.py"))


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


def write_stamp(directory: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Normalise the finished checkpoint in ``directory``, hash it and write its stamp (``record`` plus the hashes)."""
    normalise_checkpoint(directory)
    files = hash_tree(directory)
    stamp = {**record, "checkpoint_sha256": checkpoint_digest(files), "tokenizer_sha256": files["tokenizer.json"],
             "files": files, "format_sha256": FORMAT_SHA256}
    atomic_write_json(directory / STAMP_NAME, stamp)
    return stamp


def upgrade_format(path: Path) -> list[str]:
    """Bring an entry stamped under another normaliser up to date in place; the files rewritten.

    Call it holding the entry's lock: the stamp is rewritten after the files it lists."""
    stamp = json.loads((path / STAMP_NAME).read_text())
    if stamp.get("format_sha256") == FORMAT_SHA256:
        return []
    changed = normalise_checkpoint(path)
    files = {**stamp["files"], **{name: sha256_file(path / name) for name in changed}}
    atomic_write_json(path / STAMP_NAME, {**stamp, "files": files, "format_sha256": FORMAT_SHA256})
    return changed


def ready(path: Path, verify: bool) -> PreparedModel | None:
    """``from_stamp``, with an entry of an older format normalised in place first (hold the entry's lock)."""
    if from_stamp(path, verify) is None:
        return None
    try:
        upgrade_format(path)
    except (OSError, ValueError, KeyError):
        return None
    return from_stamp(path, verify=False)


def find_ready(path: Path) -> PreparedModel | None:
    """The stamped entry at ``path`` without hashing its weights (brought to the current format under its lock)."""
    if not (path / STAMP_NAME).is_file():
        return None
    with file_lock(path.parent / f".{path.name}.lock"):
        return ready(path, verify=False)


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
