"""Where a bench's servers run: backend, runtime and devices from GPU=, RUNTIME= and BACKEND=."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from harness.backends import get_backend
from harness.errors import InvalidInput
from harness.images.engine import docker_engine_present
from harness.runtime.base import default_runtime_name, nvidia_gpu_present
from harness.runtime.gpus import Device, parse_gpus, refuse_mig_parents

GPU_BACKENDS = ("vllm", "sglang")
# A dry run plans what a GPU host would run, on any machine, and makes nothing (``planning``).
_PLANNING = ContextVar("planning", default=False)


@dataclass(frozen=True)
class Placement:
    backend: str
    runtime: str
    notice: str | None = None
    gpus: tuple[Device, ...] = ()  # the devices GPU= selects, in the order given; empty on the CPU default


@contextmanager
def planning() -> Iterator[None]:
    """Plan only (``--dry-run``): placements as on a host with an NVIDIA GPU and a container engine, and a spec's
    plan names what it would prepare (a draft model, a Ray venv) instead of making it."""
    token = _PLANNING.set(True)
    try:
        yield
    finally:
        _PLANNING.reset(token)


def planning_only() -> bool:
    return _PLANNING.get()


def check_gpu(gpu: str | None) -> None:
    """``--gpu``/GPU= is unset, or devices (``0``, ``0,1``, a MIG instance): anything else is an error, never the
    CPU default."""
    parse_gpus(gpu)


def resolve_placement(gpu: str | None, backend: str | None, runtime: str | None) -> Placement:
    """GPU=N asks for the containerized GPU path; without a GPU and an engine, say so and run the CPU default."""
    check_gpu(gpu)
    gpus = parse_gpus(gpu)
    if gpus:
        presumed = planning_only()
        missing = [what for what, ok in (("NVIDIA GPU", presumed or nvidia_gpu_present()),
                                         ("Docker engine", presumed or docker_engine_present())) if not ok]
        if missing:
            notice = (f"GPU={gpu} asks for the containerized vLLM path, but this machine has no "
                      f"{' and no '.join(missing)}: running the CPU default (vllm-cpu, local runtime)")
            return Placement("vllm-cpu", "local", notice)
        if not presumed:
            refuse_mig_parents(gpus)  # a whole GPU in MIG mode serves nothing: its instances must be named
        return _checked(backend or "vllm", runtime or "docker", gpus)
    runtime = runtime or default_runtime_name()
    gpu_host = planning_only() or nvidia_gpu_present()
    return _checked(backend or ("vllm" if runtime == "docker" and gpu_host else "vllm-cpu"), runtime, (0,))


def _checked(backend: str, runtime: str, gpus: tuple[Device, ...]) -> Placement:
    """The placement, once the backend runs under the runtime; a CPU backend gets no devices."""
    runtimes = get_backend(backend).runtimes
    if runtime not in runtimes:
        raise InvalidInput(f"backend {backend} does not run under runtime {runtime}",
                           hint=f"use RUNTIME={'/'.join(runtimes)}")
    return Placement(backend, runtime, gpus=gpus if backend in GPU_BACKENDS else ())
