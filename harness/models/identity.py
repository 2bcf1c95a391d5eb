"""A checkpoint's identity, computed: the sha256 of each file that makes it (weights, config, tokenizer), and one
digest over their names and hashes, as a prepared model's stamp records them.

Hashing a 16 GB checkpoint takes minutes, so each file's hash is kept in a cache file under the infkit cache
(``model-digests/``), keyed by the checkpoint's resolved directory and valid while the file's size and mtime are
unchanged: a checkpoint is hashed once, and again only where a file changed. The cache is a hint, never the
identity: a missing or unreadable cache file only means hashing again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_json
from harness.contract.paths import cache_root
from harness.ids import sha256_bytes, sha256_file

CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


@dataclass(frozen=True)
class Identity:
    """The checkpoint's digest, each file's sha256 by name, and which files were hashed now (not from the cache)."""

    digest: str
    files: dict[str, str]
    hashed: list[str]


def digest_of(files: dict[str, str]) -> str:
    """One digest over every file's name and sha256 (sorted by name)."""
    return sha256_bytes("".join(f"{name} {sha}\n" for name, sha in sorted(files.items())).encode())


def _cache_file(directory: Path, cache_dir: Path | None) -> Path:
    key = sha256_bytes(str(directory).encode()).removeprefix("sha256:")[:24]
    return (cache_dir or cache_root() / "model-digests") / f"{key}.json"


def _read_cache(path: Path, directory: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("files", {}) if isinstance(data, dict) and data.get("directory") == str(directory) else {}


def checkpoint_identity(directory: Path, names: list[str], *, cache_dir: Path | None = None) -> Identity:
    """Hash ``names`` in ``directory`` (following the hub cache's symlinks), reusing each unchanged file's hash."""
    cache = _cache_file(directory, cache_dir)
    known = _read_cache(cache, directory)
    entries: dict[str, dict[str, Any]] = {}
    hashed: list[str] = []
    for name in sorted(names):
        st = os.stat(directory / name)
        seen = known.get(name)
        if isinstance(seen, dict) and seen.get("size") == st.st_size and seen.get("mtime_ns") == st.st_mtime_ns:
            entries[name] = seen
            continue
        entries[name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(directory / name)}
        hashed.append(name)
    if hashed or set(known) != set(entries):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(cache, {"directory": str(directory), "files": entries})
        except OSError:
            pass  # a read-only cache only costs hashing again next time
    files = {name: e["sha256"] for name, e in entries.items()}
    return Identity(digest=digest_of(files), files=files, hashed=hashed)


def model_config(directory: Path) -> dict[str, Any]:
    """The checkpoint's ``config.json`` (empty when absent or unreadable)."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def model_context(directory: Path) -> tuple[int, str] | None:
    """The longest sequence the model's config allows, and the field that says so (a nested text config too)."""
    config = model_config(directory)
    for where in (config, config.get("text_config") or {}):
        for name in CONTEXT_FIELDS:
            value = where.get(name) if isinstance(where, dict) else None
            if isinstance(value, int) and value > 0:
                return value, name
    return None


def context_within(directory: Path, limit: int) -> int:
    """A server's context for this checkpoint: ``limit``, or the model's own where that is shorter."""
    found = model_context(directory)
    return min(limit, found[0]) if found else limit


def chat_template_file(directory: Path) -> str | None:
    """Where the checkpoint keeps its chat template (the engine applies it to chat requests), or None."""
    for name in ("chat_template.jinja", "chat_template.json"):
        if (Path(directory) / name).is_file():
            return name
    try:
        tokenizer_config = json.loads((Path(directory) / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    found = isinstance(tokenizer_config, dict) and tokenizer_config.get("chat_template")
    return "tokenizer_config.json" if found else None
