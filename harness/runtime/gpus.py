"""The devices GPU= names, and what NVML says of each before a server is sized or started.

A device is a GPU index (``0``), or one MIG instance: its UUID (``MIG-<uuid>``, as ``nvidia-smi -L`` lists it)
or ``N:M`` (instance M of GPU N, the NVIDIA container toolkit's form). The docker runtime hands each one to the
engine as a device id unchanged, so an instance reaches the container as itself; a whole GPU in MIG mode is
refused (CUDA sees none of its memory through the parent, only through its instances). An instance's memory is
the instance's own, read through NVML's MIG handles (``nvmlDeviceGetMigDeviceHandleByIndex`` for ``N:M``,
``nvmlDeviceGetHandleByUUID`` for a UUID), never the parent's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from harness.errors import CapabilityMissing, InvalidInput
from harness.telemetry.gpu_sampler import device_handle, load_nvml

Device = int | str  # a GPU index, or a MIG instance ("MIG-<uuid>" or "N:M")
MAX_GPU_INDEX = 1023
MIG_UUID = re.compile(r"MIG-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
INSTANCE = re.compile(r"(\d{1,4}):(\d{1,2})")
GPU_HINT = "use e.g. GPU=0, GPU=0,1, a MIG instance GPU=MIG-<uuid> or GPU=0:1 (nvidia-smi -L lists them)"


def parse_device(text: str) -> Device | None:
    """One GPU= entry as a device, or None when it names none."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text) if int(text) <= MAX_GPU_INDEX else None
    if MIG_UUID.fullmatch(text):
        return text
    pair = INSTANCE.fullmatch(text)
    return f"{int(pair[1])}:{int(pair[2])}" if pair and int(pair[1]) <= MAX_GPU_INDEX else None


def parse_gpus(gpu: str | None) -> tuple[Device, ...]:
    """``GPU=0`` -> (0,), ``GPU=2,3`` -> (2, 3), ``GPU=MIG-…`` or ``0:1`` -> that instance; else an input error."""
    if gpu in (None, ""):
        return ()
    out = []
    for part in str(gpu).split(","):
        device = parse_device(part)
        if device is None:
            raise InvalidInput(f"--gpu {gpu!r:.60}: {part.strip()!r:.50} is not a GPU index or MIG instance",
                               hint=GPU_HINT)
        out.append(device)
    if len(set(out)) != len(out):
        raise InvalidInput(f"GPU={gpu!r:.60} names a device twice")
    return tuple(out)


def is_mig(device: Device) -> bool:
    return isinstance(device, str)


@contextmanager
def nvml_session(nvml: ModuleType | None = None) -> Iterator[ModuleType]:
    """NVML initialised (``pynvml``, or ``nvml`` as given); ``CapabilityMissing`` with NVML's reason if it cannot."""
    nv, why = load_nvml(nvml)
    if nv is None:
        raise CapabilityMissing(why or "NVML cannot be read here")
    try:
        yield nv
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - a shutdown that fails leaves nothing to clean up
            pass


def handle_of(nv: ModuleType, device: Device) -> Any:
    """The NVML handle of a GPU index or a MIG instance; ``CapabilityMissing`` naming the device if NVML has none."""
    try:
        return device_handle(nv, device)
    except Exception as exc:
        raise CapabilityMissing(f"GPU {device}: NVML finds no such device ({exc or type(exc).__name__})",
                                hint=GPU_HINT) from None


def mig_parent(nv: ModuleType, device: Device) -> str | None:
    """Why a whole GPU in MIG mode cannot serve (None: not in MIG mode, not a whole GPU, or NVML cannot say)."""
    if is_mig(device):
        return None
    try:
        current, _ = nv.nvmlDeviceGetMigMode(handle_of(nv, device))
    except Exception:  # a GPU without MIG support answers NOT_SUPPORTED: not in MIG mode
        return None
    if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    return (f"GPU {device} is in MIG mode: CUDA sees none of its memory through the whole device, only through its "
            f"instances; name one, GPU=MIG-<uuid> or GPU={device}:<n> (nvidia-smi -L lists them)")


def refuse_mig_parents(devices: tuple[Device, ...], nvml: ModuleType | None = None) -> None:
    """An input error naming the first whole GPU in MIG mode among ``devices`` (nothing where NVML cannot say)."""
    try:
        with nvml_session(nvml) as nv:
            reason = next((r for d in devices if (r := mig_parent(nv, d))), None)
    except CapabilityMissing:
        return  # no NVML here: the driver check before a start says what is missing
    if reason:
        raise InvalidInput(reason)


def memory_total_bytes(device: Device, nvml: ModuleType | None = None) -> int:
    """The device's memory: a MIG instance's own; a whole GPU in MIG mode is refused (``InvalidInput``)."""
    with nvml_session(nvml) as nv:
        reason = mig_parent(nv, device)
        if reason:
            raise InvalidInput(reason)
        return int(nv.nvmlDeviceGetMemoryInfo(handle_of(nv, device)).total)


def device_name(device: Device, nvml: ModuleType | None = None) -> str:
    """The device's name as NVML gives it (a MIG instance's names its profile)."""
    with nvml_session(nvml) as nv:
        name = nv.nvmlDeviceGetName(handle_of(nv, device))
    return name.decode() if isinstance(name, bytes) else str(name)
