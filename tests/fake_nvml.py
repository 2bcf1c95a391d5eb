"""A fake ``libnvidia-ml.so`` under the real ``pynvml`` (nvidia-ml-py): every wrapper of pynvml runs unchanged.

``install(monkeypatch, FakeNvmlLib(...))`` puts the fake where pynvml keeps its loaded library (``pynvml.nvmlLib``)
and empties pynvml's function-pointer cache, so ``_nvmlGetFunctionPointer`` hands pynvml's wrappers these C
functions. Each takes the arguments the C API does (handles as ``nvmlDevice_t`` pointers, outputs as ``byref``
references or arrays it fills) and returns an ``nvmlReturn_t`` code, as the driver's library would.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import pynvml

HANDLE_BASE = 0x1000  # a device's handle is this plus its index, as an opaque pointer value


@dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total_bytes: int = 80 * 2**30
    used_bytes: list[int] = field(default_factory=lambda: [600 * 2**20])  # read in turn, the last one repeats
    power_mw: int = 350_000
    energy_mj: int | None = 9_000_000  # None: the device has no energy counter (NVML_ERROR_NOT_SUPPORTED)
    energy_mw_rate: float = 0.0  # the counter advances as if drawing this many mW, per monotonic second
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    util: tuple[int, int] = (97, 61)
    reasons: int = 0  # clocks event reasons bit mask
    pids: list[int] = field(default_factory=list)  # compute processes on the device
    reads: int = 0
    mig_mode: int | None = None  # 1: MIG enabled, 0: disabled; None: no MIG on this device (NOT_SUPPORTED)


class FakeNvmlLib:
    """The C functions pynvml looks up by name; ``calls`` counts every call by name."""

    def __init__(self, devices: list[FakeDevice], clock=None, mig_of: dict[int, list[int]] | None = None):
        self.devices = devices
        self.mig_of = mig_of or {}
        self.calls: dict[str, int] = {}
        self.clock = clock or __import__("time").monotonic
        self.t0 = self.clock()

    def __getattr__(self, name: str):  # a function this driver does not have: pynvml raises FunctionNotFound
        raise AttributeError(name)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _device(self, handle) -> FakeDevice:
        return self.devices[ctypes.cast(handle, ctypes.c_void_p).value - HANDLE_BASE]

    @staticmethod
    def _put_handle(ref, index: int) -> None:
        ctypes.memmove(ctypes.addressof(ref._obj), ctypes.byref(ctypes.c_void_p(HANDLE_BASE + index)),
                       ctypes.sizeof(ctypes.c_void_p))

    def nvmlInitWithFlags(self, flags):
        self._count("nvmlInitWithFlags")
        return pynvml.NVML_SUCCESS

    def nvmlShutdown(self):
        self._count("nvmlShutdown")
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, c_index, ref):
        if not 0 <= c_index.value < len(self.devices):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._put_handle(ref, c_index.value)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetHandleByUUID(self, c_uuid, ref):
        uuids = [d.uuid for d in self.devices]
        if c_uuid.value.decode() not in uuids:
            return pynvml.NVML_ERROR_NOT_FOUND
        self._put_handle(ref, uuids.index(c_uuid.value.decode()))
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, parent, c_index, ref):
        """MIG instance M of a parent: the fake lists instances after the GPUs, ``mig_of[parent index] = [indexes]``."""
        instances = self.mig_of.get(ctypes.cast(parent, ctypes.c_void_p).value - HANDLE_BASE, [])
        if c_index.value >= len(instances):
            return pynvml.NVML_ERROR_NOT_FOUND
        self._put_handle(ref, instances[c_index.value])
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMigMode(self, handle, current_ref, pending_ref):
        mode = self._device(handle).mig_mode
        if mode is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        current_ref._obj.value = pending_ref._obj.value = mode
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetName(self, handle, c_name, length):
        c_name.value = self._device(handle).name.encode()
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        dev = self._device(handle)
        used = dev.used_bytes[min(dev.reads, len(dev.used_bytes) - 1)]
        dev.reads += 1
        ref._obj.total, ref._obj.used, ref._obj.free = dev.total_bytes, used, dev.total_bytes - used
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle, ref):
        ref._obj.value = self._device(handle).power_mw
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, ref):
        self._count("nvmlDeviceGetTotalEnergyConsumption")
        dev = self._device(handle)
        if dev.energy_mj is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        ref._obj.value = int(dev.energy_mj + dev.energy_mw_rate * (self.clock() - self.t0))
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetClockInfo(self, handle, c_type, ref):
        dev = self._device(handle)
        ref._obj.value = {pynvml.NVML_CLOCK_SM: dev.sm_mhz, pynvml.NVML_CLOCK_MEM: dev.mem_mhz}.get(c_type.value, 0)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle, ref):
        ref._obj.gpu, ref._obj.memory = self._device(handle).util
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, ref):
        self._count("nvmlDeviceGetCurrentClocksEventReasons")
        ref._obj.value = self._device(handle).reasons
        return pynvml.NVML_SUCCESS

    def _processes(self, pids: list[int], count_ref, array) -> int:
        if array is None:  # the size query: NVML says how many there are
            count_ref._obj.value = len(pids)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if pids else pynvml.NVML_SUCCESS
        for i, pid in enumerate(pids):
            array[i].pid, array[i].usedGpuMemory = pid, 2**30
        count_ref._obj.value = len(pids)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count_ref, array):
        return self._processes(self._device(handle).pids, count_ref, array)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle, count_ref, array):
        return self._processes([], count_ref, array)


def install(monkeypatch, lib: FakeNvmlLib) -> FakeNvmlLib:
    """Make ``lib`` the library pynvml loaded: its own wrappers, locks and error mapping run on top of it."""
    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return lib
