"""Host NVIDIA driver check before starting a CUDA image, in NVIDIA's compatibility terms.

- **Full support**: the driver is at least the one the image's CUDA release ships with
  (CUDA 12.8: R570, 570.26; 12.9: R575, 575.51.03) — the lock's ``cuda.min_driver``.
- **Minor-version compatibility**: any driver of the same major family's minimum
  (CUDA 12.x: R525, 525.60.13) runs a newer 12.x userspace, with a limited feature set:
  no PTX JIT (PTX newer than the driver cannot be compiled, so kernels must ship SASS for
  the GPU), and no API or feature that needs the newer driver. The check passes with a
  warning that says so.
- **Forward compatibility**: below that minimum, only a data-centre GPU with the CUDA
  forward-compatibility package (``cuda-compat-12-x``) runs the image;
  ``allow_forward_compat`` (``INFKIT_CUDA_FORWARD_COMPAT=1``) says that package is in place.
  Without it the check fails with the numbers, before the engine fails deep inside with
  "CUDA driver version is insufficient".
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import CapabilityMissing

# The minimum driver of CUDA minor-version compatibility per CUDA major (NVIDIA's CUDA
# Compatibility guide, Linux drivers).
MINOR_VERSION_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
FULL = "full"
MINOR_VERSION = "minor_version_compatibility"
FORWARD = "forward_compatibility"
MINOR_VERSION_LIMITS = (
    "no PTX JIT: PTX built for CUDA {cuda} cannot be JIT-compiled by this driver, so kernels "
    "must ship SASS for this GPU",
    "no CUDA API or feature newer than the driver's own CUDA release",
)


@dataclass(frozen=True)
class DriverCheck:
    driver_version: str
    required: str  # the full-support driver of the image's CUDA release
    cuda_version: str
    mechanism: str  # full | minor_version_compatibility | forward_compatibility
    warning: str | None = None  # what is lost when the mechanism is not full support


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


def branch(version: str) -> str:
    return f"R{version.split('.')[0]}"


def check_driver(
    cuda_version: str, min_driver: str, *, driver_version: str | None = None, allow_forward_compat: bool = False
) -> DriverCheck:
    """Which compatibility mechanism runs CUDA ``cuda_version`` on the host driver; ``CapabilityMissing`` if none."""
    found = driver_version if driver_version is not None else host_driver_version()
    have = version_tuple(found)
    if have >= version_tuple(min_driver):
        return DriverCheck(found, min_driver, cuda_version, FULL)
    floor = MINOR_VERSION_FLOOR.get(version_tuple(cuda_version)[0])
    if floor and have >= version_tuple(floor):
        lost = "; ".join(limit.format(cuda=cuda_version) for limit in MINOR_VERSION_LIMITS)
        warning = (
            f"host NVIDIA driver {found} is older than {min_driver} ({branch(min_driver)}, full support of CUDA "
            f"{cuda_version}); running through CUDA minor-version compatibility ({branch(floor)}+), which "
            f"loses: {lost}. Upgrade to {branch(min_driver)}+ for full support"
        )
        return DriverCheck(found, min_driver, cuda_version, MINOR_VERSION, warning)
    if allow_forward_compat:
        warning = (
            f"host NVIDIA driver {found} is below the CUDA {cuda_version} minimum {floor or min_driver}; "
            "relying on the CUDA forward-compatibility package (INFKIT_CUDA_FORWARD_COMPAT=1, data-centre GPUs only)"
        )
        return DriverCheck(found, min_driver, cuda_version, FORWARD, warning)
    minimum = floor or min_driver
    raise CapabilityMissing(
        f"host NVIDIA driver {found} is older than {minimum}, the minimum for CUDA {cuda_version} images "
        f"({branch(minimum)}+ through minor-version compatibility; {branch(min_driver)}+ for full support)",
        hint="upgrade the driver, or on a data-centre GPU with the CUDA forward-compatibility package "
        "(cuda-compat) set INFKIT_CUDA_FORWARD_COMPAT=1",
    )
