"""How the GPUs are connected, as NVML sees it: per pair the nearest common ancestor, per GPU its active NVLinks
(or why there is nothing to say). Part of the machine's fingerprint."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

# NVML topology levels (nvmlGpuTopologyLevel_t), nearest first.
LEVELS = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches", 30: "PCIe host bridge",
          40: "same NUMA node (CPU interconnect)", 50: "across CPU sockets (SMP)"}


def _pairs(nv: ModuleType, handles: list[Any]) -> list[dict[str, Any]]:
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            try:
                level = int(nv.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
            except Exception:  # noqa: BLE001 - an NVML query a driver lacks is an unknown, not a failure
                level = None
            pairs.append({"gpus": [i, j], "level": level, "link": LEVELS.get(level, "unknown") if level is not None
                          else "unknown"})
    return pairs


def _nvlinks(nv: ModuleType, handle: Any) -> int | None:
    links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
    active = 0
    for link in range(links):
        try:
            active += int(bool(nv.nvmlDeviceGetNvLinkState(handle, link)))
        except Exception:  # noqa: BLE001 - no such link, or no NVLink at all
            if link == 0:
                return None
            break
    return active


def topology(nvml: ModuleType | None = None) -> dict[str, Any]:
    """GPU interconnect as NVML sees it: per pair the nearest common ancestor, per GPU its active NVLinks."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return {"gpus": 0, "reason": "NVML Python bindings (nvidia-ml-py) are not installed"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        return {"gpus": 0, "reason": f"NVML could not initialise ({exc or type(exc).__name__}): no NVIDIA driver"}
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        return {"gpus": len(handles), "nvlinks_active": [_nvlinks(nvml, h) for h in handles],
                "pairs": _pairs(nvml, handles), "reason": None if handles else "NVML found no GPU devices"}
    except Exception as exc:  # noqa: BLE001
        return {"gpus": 0, "reason": f"NVML topology query failed: {exc or type(exc).__name__}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
