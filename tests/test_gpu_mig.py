"""MIG instances on GPU=: parsed, handed to the engine as device ids, sized from the instance's own memory, and a
whole GPU in MIG mode refused — against the real ``pynvml`` (nvidia-ml-py) whose C functions are replaced by a
fake driver library (``tests/fake_nvml.py``) taking the C API's arguments."""

from __future__ import annotations

import pytest

from harness.bench import placement
from harness.bench.benches import bench72
from harness.bench.placement import planning, resolve_placement
from harness.errors import InvalidInput
from harness.runtime.docker import device_requests
from harness.runtime.gpus import device_name, memory_total_bytes, parse_gpus, refuse_mig_parents

pytest.importorskip("pynvml")
from tests.fake_nvml import FakeDevice, FakeNvmlLib, install  # noqa: E402 - needs pynvml

GIB = 2**30
MIG_UUIDS = ["MIG-4f3c2a1b-0d9e-5c8f-a7b6-1e2d3c4b5a69", "MIG-9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"]


@pytest.fixture
def host(monkeypatch):
    """GPU 0 in MIG mode with two instances (10 and 20 GiB), GPU 1 a whole 80 GiB device without MIG."""
    devices = [FakeDevice("GPU-00000000-0000-0000-0000-000000000000", mig_mode=1),
               FakeDevice("GPU-11111111-1111-1111-1111-111111111111"),
               FakeDevice(MIG_UUIDS[0], name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", total_bytes=10 * GIB),
               FakeDevice(MIG_UUIDS[1], name="NVIDIA H100 80GB HBM3 MIG 2g.20gb", total_bytes=20 * GIB)]
    return install(monkeypatch, FakeNvmlLib(devices, mig_of={0: [2, 3]}))


def test_gpu_takes_indexes_mig_uuids_and_gpu_instance_pairs():
    assert parse_gpus("0") == (0,) and parse_gpus("2, 3") == (2, 3)
    assert parse_gpus(f"{MIG_UUIDS[0]},1:0") == (MIG_UUIDS[0], "1:0")
    for bad in ("MIG-xyz", "0:", ":1", "0:1:2", "GPU-4f3c2a1b-0d9e-5c8f-a7b6-1e2d3c4b5a69", "1:0,1:0", "-1"):
        with pytest.raises(InvalidInput) as info:
            parse_gpus(bad)
        assert "\n" not in str(info.value)


def test_each_device_reaches_the_engine_as_its_own_device_id():
    pytest.importorskip("docker")
    (request,) = device_requests((MIG_UUIDS[0], "0:1", 2))
    assert request["DeviceIDs"] == [MIG_UUIDS[0], "0:1", "2"] and request["Capabilities"] == [["gpu"]]


def test_an_instance_is_sized_from_its_own_memory_never_its_parents(host):
    assert memory_total_bytes(MIG_UUIDS[1]) == 20 * GIB
    assert memory_total_bytes("0:0") == 10 * GIB
    assert memory_total_bytes(1) == 80 * GIB  # a GPU without MIG: the whole device
    assert device_name("0:1") == "NVIDIA H100 80GB HBM3 MIG 2g.20gb"
    with pytest.raises(InvalidInput, match="GPU 0 is in MIG mode.*GPU=0:<n>"):
        memory_total_bytes(0)


def test_a_whole_gpu_in_mig_mode_is_refused_before_anything_starts(host, monkeypatch):
    refuse_mig_parents((1, MIG_UUIDS[0], "0:1"))  # instances and a GPU without MIG pass
    monkeypatch.setattr(placement, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(placement, "docker_engine_present", lambda: True)
    with pytest.raises(InvalidInput, match="in MIG mode") as info:
        resolve_placement("0", None, None)
    assert "\n" not in str(info.value)
    assert resolve_placement("0:1", None, None).gpus == ("0:1",)
    with planning():  # a dry run plans the instance without asking NVML
        assert resolve_placement(MIG_UUIDS[0], None, None).gpus == (MIG_UUIDS[0],)


def test_bench72_sizes_its_kv_pool_on_the_instance_it_is_given(host):
    assert bench72.device_bytes(bench72.SPEC.config(gpu="0:1")) == 20 * GIB
    with pytest.raises(InvalidInput, match="in MIG mode"):
        bench72.device_bytes(bench72.SPEC.config(gpu="0"))
