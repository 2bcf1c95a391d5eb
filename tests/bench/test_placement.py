"""Where a bench's servers run: GPU=, RUNTIME= and BACKEND= to a backend and a runtime."""

from __future__ import annotations

import pytest

from harness.bench import placement
from harness.bench.placement import resolve_placement
from harness.errors import InvalidInput


def test_gpu_requested_without_gpu_says_so_and_runs_the_cpu_default(monkeypatch):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(placement, "docker_engine_present", lambda: False)
    where = resolve_placement("0", None, None)
    assert (where.backend, where.runtime) == ("vllm-cpu", "local")
    assert "GPU=0" in where.notice and "NVIDIA GPU" in where.notice and "\n" not in where.notice


def test_gpu_with_engine_takes_the_container_path(monkeypatch):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(placement, "docker_engine_present", lambda: True)
    assert resolve_placement("0", None, None) == placement.Placement("vllm", "docker", None)


def test_docker_runtime_without_a_gpu_runs_the_cpu_default_in_its_image(monkeypatch):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: False)
    where = resolve_placement(None, None, "docker")
    assert (where.backend, where.runtime) == ("vllm-cpu", "docker")  # the inf-vllm-cpu image
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: True)
    assert resolve_placement(None, None, "docker").backend == "vllm"


def test_backend_runtime_mismatch_is_an_input_error():
    with pytest.raises(InvalidInput, match="does not run under runtime local"):
        resolve_placement(None, "vllm", "local")
