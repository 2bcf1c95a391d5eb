"""MIG instances on GPU=: parsed, handed to the engine as device ids, sized from the instance's own memory, and a
whole GPU in MIG mode refused — against the real ``pynvml`` (nvidia-ml-py) whose C functions are replaced by a
fake driver library taking the C API's arguments (handles as ``nvmlDevice_t``, outputs through ``byref``)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import pytest

from harness.bench import placement
from harness.bench.benches import bench72
from harness.bench.placement import planning, resolve_placement
from harness.errors import InvalidInput
from harness.runtime.docker import device_requests
from harness.runtime.gpus import memory_total_bytes, parse_gpus, refuse_mig_parents

pynvml = pytest.importorskip("pynvml")

GIB = 2**30
GPU_BASE, MIG_BASE = 0x1000, 0x2000  # opaque handle values: a GPU's is GPU_BASE + index, an instance's MIG_BASE + …
MIG_UUIDS = ["MIG-4f3c2a1b-0d9e-5c8f-a7b6-1e2d3c4b5a69", "MIG-9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"]


@dataclass
class Gpu:
    total_bytes: int = 80 * GIB
    mig_mode: int | None = 0  # None: the GPU has no MIG (NVML_ERROR_NOT_SUPPORTED)
    instances: list[tuple[str, int]] = field(default_factory=list)  # (UUID, memory bytes) per MIG device index


class FakeMigLib:
    """The C functions pynvml looks up by name for a host of ``gpus``."""

    def __init__(self, gpus: list[Gpu]):
        self.gpus = gpus

    def __getattr__(self, name: str):  # a function this driver lacks: pynvml raises FUNCTION_NOT_FOUND
        raise AttributeError(name)

    @staticmethod
    def _put(ref, value: int) -> None:
        ctypes.memmove(ctypes.addressof(ref._obj), ctypes.byref(ctypes.c_void_p(value)), ctypes.sizeof(ctypes.c_void_p))

    @staticmethod
    def _value(handle) -> int:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0

    def nvmlInitWithFlags(self, flags):
        return pynvml.NVML_SUCCESS

    def nvmlShutdown(self):
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, c_index, ref):
        if not 0 <= c_index.value < len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._put(ref, GPU_BASE + c_index.value)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetHandleByUUID(self, c_uuid, ref):
        for i, gpu in enumerate(self.gpus):
            for m, (uuid, _) in enumerate(gpu.instances):
                if uuid == c_uuid.value.decode():
                    self._put(ref, MIG_BASE + 16 * i + m)
                    return pynvml.NVML_SUCCESS
        return pynvml.NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetMigMode(self, handle, current_ref, pending_ref):
        value = self._value(handle)
        if value >= MIG_BASE or self.gpus[value - GPU_BASE].mig_mode is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        current_ref._obj.value = pending_ref._obj.value = self.gpus[value - GPU_BASE].mig_mode
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, c_index, ref):
        index = self._value(handle) - GPU_BASE
        if not 0 <= c_index.value < len(self.gpus[index].instances):
            return pynvml.NVML_ERROR_NOT_FOUND
        self._put(ref, MIG_BASE + 16 * index + c_index.value)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        value = self._value(handle)
        if value >= MIG_BASE:
            total = self.gpus[(value - MIG_BASE) // 16].instances[(value - MIG_BASE) % 16][1]
        else:
            total = self.gpus[value - GPU_BASE].total_bytes
        ref._obj.total, ref._obj.used, ref._obj.free = total, 0, total
        return pynvml.NVML_SUCCESS


@pytest.fixture
def host(monkeypatch):
    """GPU 0 in MIG mode with two instances (10 and 20 GiB), GPU 1 a whole 80 GiB device without MIG."""
    lib = FakeMigLib([Gpu(mig_mode=1, instances=[(MIG_UUIDS[0], 10 * GIB), (MIG_UUIDS[1], 20 * GIB)]),
                      Gpu(mig_mode=None)])
    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return lib


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
