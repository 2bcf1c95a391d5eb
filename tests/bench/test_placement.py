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
    assert resolve_placement("0", None, None) == placement.Placement("vllm", "docker", None, (0,))
    assert resolve_placement("2,3", None, None).gpus == (2, 3)


def test_docker_runtime_without_a_gpu_runs_the_cpu_default_in_its_image(monkeypatch):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: False)
    where = resolve_placement(None, None, "docker")
    assert (where.backend, where.runtime) == ("vllm-cpu", "docker")  # the inf-vllm-cpu image
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: True)
    assert resolve_placement(None, None, "docker").backend == "vllm"


def test_backend_runtime_mismatch_is_an_input_error():
    with pytest.raises(InvalidInput, match="does not run under runtime local"):
        resolve_placement(None, "vllm", "local")


@pytest.mark.parametrize("gpu", ["abc", "-1", "0,", "1,1", "0;1"])
def test_a_gpu_that_is_not_a_device_list_is_an_input_error_before_any_notice(monkeypatch, gpu):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: False)  # the old code returned a notice here
    with pytest.raises(InvalidInput, match="GPU="):
        resolve_placement(gpu, None, None)


def test_planning_resolves_the_gpu_path_on_a_machine_without_one(monkeypatch):
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(placement, "docker_engine_present", lambda: False)
    with placement.planning():
        where = resolve_placement("1", "sglang", None)
    assert (where.backend, where.runtime, where.gpus, where.notice) == ("sglang", "docker", (1,), None)
    assert resolve_placement("1", None, None).backend == "vllm-cpu"  # outside a dry run: the CPU default
