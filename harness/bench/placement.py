"""Where a bench's servers run: backend and runtime from GPU=, RUNTIME= and BACKEND=."""

from __future__ import annotations

from dataclasses import dataclass

from harness.backends import get_backend
from harness.errors import InvalidInput
from harness.images.engine import docker_engine_present
from harness.runtime.base import default_runtime_name, nvidia_gpu_present


@dataclass(frozen=True)
class Placement:
    backend: str
    runtime: str
    notice: str | None = None


MAX_GPU_INDEX = 1023


def check_gpu(gpu: str | None) -> None:
    """``--gpu``/GPU= is unset, or device indexes (``0``, ``0,1``): anything else is an error, never the CPU default."""
    if gpu in (None, ""):
        return
    for part in str(gpu).split(","):
        text = part.strip()
        if not (text.isascii() and text.isdigit() and int(text) <= MAX_GPU_INDEX):
            raise InvalidInput(f"--gpu {gpu!r:.40}: {text!r:.20} is not a GPU index", hint="use e.g. GPU=0 or GPU=0,1")


def resolve_placement(gpu: str | None, backend: str | None, runtime: str | None) -> Placement:
    """GPU=N asks for the containerized GPU path; without a GPU and an engine, say so and run the CPU default."""
    check_gpu(gpu)
    if gpu not in (None, ""):
        missing = [what for what, ok in (("NVIDIA GPU", nvidia_gpu_present()),
                                         ("Docker engine", docker_engine_present())) if not ok]
        if missing:
            notice = (f"GPU={gpu} asks for the containerized vLLM path, but this machine has no "
                      f"{' and no '.join(missing)}: running the CPU default (vllm-cpu, local runtime)")
            return Placement("vllm-cpu", "local", notice)
        return Placement(backend or "vllm", runtime or "docker")
    runtime = runtime or default_runtime_name()
    backend = backend or ("vllm" if runtime == "docker" and nvidia_gpu_present() else "vllm-cpu")
    if runtime not in get_backend(backend).runtimes:
        raise InvalidInput(f"backend {backend} does not run under runtime {runtime}",
                           hint=f"use RUNTIME={'/'.join(get_backend(backend).runtimes)}")
    return Placement(backend, runtime)
