"""What ``MODEL=`` names, resolved offline: a catalog model, a checkpoint directory, or an id in the local HF cache.

``resolve_model`` is the one place a model name becomes a served directory and its identity:

- a catalog (or derived) name: the checkpoint ``harness.models.prepare`` makes (prepared on first use);
- a path to a Hugging Face-format checkpoint directory (``config.json``, ``*.safetensors``, ``tokenizer.json``):
  served read-only where it lies;
- a model id (``org/name``) in the local Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``): its ``refs/main`` snapshot; nothing is ever downloaded.

A checkpoint's identity is computed, not declared: ``harness.models.identity`` hashes every weight file, the
config and the tokenizer files, once per file version.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InvalidInput
from harness.models.derived import DERIVED
from harness.models.identity import checkpoint_identity
from harness.models.prepare import CATALOG, ensure_model, find_model, model_keys
from harness.models.stamp import PreparedModel

HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class LocalCheckpoint(PreparedModel):
    """A checkpoint the user brought: served where it lies; ``origin`` says where it was found and what was hashed."""

    origin: dict[str, Any] = field(default_factory=dict)

    def run_entry(self) -> dict[str, Any]:  # type: ignore[override]
        """The ``model`` entry of run.json: the computed version and where the checkpoint was found."""
        return {**self.model_ref, "source": self.origin}


def hub_cache() -> Path:
    """Where the Hugging Face hub keeps its downloads on this machine (read, never written)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def is_catalog(name: str) -> bool:
    return name in CATALOG or name in DERIVED


def looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or Path(name).expanduser().exists()


def snapshot_of(model_id: str, cache: Path | None = None) -> Path:
    """The snapshot directory ``refs/main`` points at for ``model_id`` in the local hub cache (offline)."""
    cache = cache or hub_cache()
    repo = cache / ("models--" + model_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    revision = ref.read_text().strip() if ref.is_file() else ""
    snapshots = sorted((repo / "snapshots").glob("*")) if (repo / "snapshots").is_dir() else []
    if revision and (repo / "snapshots" / revision).is_dir():
        return repo / "snapshots" / revision
    if not revision and len(snapshots) == 1:  # a cache written without refs (e.g. a revision pinned by hash)
        return snapshots[0]
    raise InvalidInput(f"model {model_id!r}: not in the local Hugging Face cache (looked in {repo}; nothing is "
                       "downloaded)", hint="set HF_HUB_CACHE or HF_HOME, pass a checkpoint directory, or a catalog "
                       "name: " + ", ".join(model_keys()))


def checkpoint_files(path: Path) -> dict[str, list[str]]:
    """The files that make ``path`` a servable checkpoint, by role; a one-line error when one is missing."""
    if not path.is_dir():
        raise InvalidInput(f"model {path}: no such directory", hint="a Hugging Face-format checkpoint directory")
    names = sorted(p.name for p in path.iterdir() if p.is_file())
    if "config.json" not in names:
        raise InvalidInput(f"model {path}: not a checkpoint (no config.json)",
                           hint="a Hugging Face-format directory: config.json, *.safetensors, tokenizer.json")
    weights = [n for n in names if n.endswith(".safetensors") or n == "model.safetensors.index.json"]
    if not any(n.endswith(".safetensors") for n in weights):
        raise InvalidInput(f"model {path}: not a checkpoint (no *.safetensors weights)",
                           hint="convert .bin/.pt weights to safetensors first")
    if "tokenizer.json" not in names:
        raise InvalidInput(f"model {path}: checkpoint without a tokenizer (no tokenizer.json)",
                           hint="save the model's tokenizer beside it (tokenizer.save_pretrained(dir))")
    tokenizer = [n for n in names if n.startswith(("tokenizer", "special_tokens_map", "added_tokens", "vocab.",
                                                   "merges.", "chat_template"))]
    return {"weights": weights, "config": ["config.json"], "tokenizer": tokenizer}


def local_checkpoint(path: Path, origin: dict[str, Any], *, name: str,
                     cache_dir: Path | None = None) -> LocalCheckpoint:
    """A checkpoint directory checked and identified (its files hashed once per version)."""
    files = checkpoint_files(path)
    ident = checkpoint_identity(path, [n for role in files.values() for n in role], cache_dir=cache_dir)
    return LocalCheckpoint(key=name, name=name, path=path, gguf_sha256="", checkpoint_sha256=ident.digest,
                           tokenizer_sha256=ident.files["tokenizer.json"], derived=None,
                           origin={**origin, "files": ident.files, "hashed_now": ident.hashed})


def resolve_checkpoint(name: str, *, cache_dir: Path | None = None) -> LocalCheckpoint | None:
    """``name`` as a checkpoint path or a hub-cache id; None for a catalog name (prepared by ``ensure_model``)."""
    if is_catalog(name):
        return None
    if looks_like_path(name):
        path = Path(name).expanduser().resolve()
        return local_checkpoint(path, {"kind": "directory", "path": str(path)}, name=path.name, cache_dir=cache_dir)
    if HF_ID.match(name):
        snapshot = snapshot_of(name)
        return local_checkpoint(snapshot, {"kind": "hf-cache", "id": name, "revision": snapshot.name,
                                           "path": str(snapshot)}, name=name, cache_dir=cache_dir)
    raise InvalidInput(f"unknown model {name!r}: not a catalog name, a checkpoint directory or an org/name id",
                       hint="catalog names: " + ", ".join(model_keys()))


def resolve_model(name: str, *, progress: Callable[[str], Any] = print) -> PreparedModel:
    """The served checkpoint ``MODEL=`` names: a catalog model (prepared when missing) or the user's own."""
    found = resolve_checkpoint(name)
    if found is not None:
        return found
    return ensure_model(name, progress=progress)


def find_resolved(name: str) -> PreparedModel | None:
    """The checkpoint ``name`` names when it needs no setup (the user's own, or a catalog model already prepared);
    None for a catalog model not prepared yet. A bad path or a missing id raises at once."""
    found = resolve_checkpoint(name)
    if found is not None:
        return found
    try:
        return find_model(name)
    except InvalidInput:  # a derived model: find_model does not look those up
        return None


def identify_served(name: str) -> PreparedModel | None:
    """The checkpoint behind a name a server serves, where this machine holds it without any setup: a directory
    (which must be a checkpoint), an id in the local hub cache, or a catalog model already prepared; None for any
    other name (an endpoint's own, whose weights are not here)."""
    if looks_like_path(name) or (HF_ID.match(name) and (hub_cache() / ("models--" + name.replace("/", "--"))).is_dir()):
        return resolve_checkpoint(name)
    return find_resolved(name) if is_catalog(name) else None
