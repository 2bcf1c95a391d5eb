"""Host NVIDIA driver check before starting a CUDA image.

A CUDA 12.8 userspace needs an R570+ kernel driver (12.9: R575+); an older one
fails deep inside the engine with "CUDA driver version is insufficient". The
check reads the driver through NVML and fails first, with the numbers. Data-
centre GPUs can run newer CUDA on older drivers through the CUDA forward-
compatibility package; ``allow_forward_compat`` accepts that case explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import CapabilityMissing


@dataclass(frozen=True)
class DriverCheck:
    driver_version: str | None
    required: str
    cuda_version: str
    ok: bool
    forward_compat: bool = False


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def host_driver_version() -> str:
    """The NVIDIA kernel driver version from NVML; ``CapabilityMissing`` when there is none."""
    try:
        import pynvml
    except ImportError as exc:
        raise CapabilityMissing("nvidia-ml-py is not installed", hint="pip install nvidia-ml-py") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise CapabilityMissing(f"no usable NVIDIA driver on this host (NVML: {exc})") from exc
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return version.decode() if isinstance(version, bytes) else str(version)


def check_driver(cuda_version: str, min_driver: str, *, driver_version: str | None = None,
                 allow_forward_compat: bool = False) -> DriverCheck:
    """Raise ``CapabilityMissing`` unless the host driver runs CUDA ``cuda_version`` images."""
    found = driver_version if driver_version is not None else host_driver_version()
    if version_tuple(found) >= version_tuple(min_driver):
        return DriverCheck(found, min_driver, cuda_version, ok=True)
    if allow_forward_compat:
        return DriverCheck(found, min_driver, cuda_version, ok=True, forward_compat=True)
    raise CapabilityMissing(
        f"host NVIDIA driver {found} is older than {min_driver}, the minimum for CUDA {cuda_version} images "
        f"(R{min_driver.split('.')[0]}+)",
        hint="upgrade the driver, or on a data-centre GPU with the CUDA forward-compatibility package "
        "set INFKIT_CUDA_FORWARD_COMPAT=1",
    )
