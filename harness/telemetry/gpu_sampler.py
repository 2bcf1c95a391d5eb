"""GPU telemetry from NVML during a measured run: device memory, power, energy, clocks, utilisation, clock events.

``idle_check(devices)`` runs before a server starts: it reads each device's memory in use (the idle baseline the
run's device memory is measured from), the processes already on it and its clock-event reasons. ``GpuSampler``
reads every device each ``interval_s`` in a daemon thread of the measuring process. The client sends from its own
worker processes and every NVML call releases the GIL (ctypes), so a slow or hung NVML read delays only the next
sample; ``stop`` waits a bounded time for the thread and reads the energy counters once more itself.

Devices are named by index (``0``), MIG instance (``0:1``) or UUID (``GPU-…``, ``MIG-…``). Energy comes from
``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded) where the device has it, else from the power
readings integrated over the samples (trapezoids); each device's ``energy_source`` says which.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from harness.telemetry.periodic import Periodic

DeviceRef = int | str  # an index or a UUID (GPU-..., MIG-...)

# Clock-event reasons that slow the device for reasons outside the workload: a run under them measures the
# machine's cooling or power delivery, not the engine. SwPowerCap (the device at its power limit under load),
# GpuIdle, SyncBoost and the clock settings are recorded but judge nothing.
THROTTLING = ("HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
ENERGY_COUNTER = "nvml_energy_counter"
POWER_INTEGRATED = "nvml_power_integrated"


def load_nvml(nvml: ModuleType | None = None) -> tuple[ModuleType | None, str | None]:
    """(initialised pynvml, None), or (None, the reason NVML cannot be read here)."""
    try:
        nv = nvml or importlib.import_module("pynvml")
    except ImportError:
        return None, "NVML Python bindings (nvidia-ml-py) are not installed"
    try:
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...: all mean "no NVML"
        return None, f"NVML could not initialise ({exc or type(exc).__name__}): no NVIDIA driver on this machine"
    return nv, None


def _shutdown(nv: ModuleType) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:  # noqa: BLE001 - a shutdown that fails leaves nothing to clean up
        pass


def device_handle(nv: ModuleType, ref: DeviceRef) -> Any:
    """An NVML handle for an index (int or digits), a MIG instance as ``N:M`` (instance M of GPU N) or a GPU-/MIG-
    UUID."""
    if isinstance(ref, int) or str(ref).isdigit():
        return nv.nvmlDeviceGetHandleByIndex(int(ref))
    parent, colon, instance = str(ref).partition(":")
    if colon and parent.isdigit() and instance.isdigit():
        return nv.nvmlDeviceGetMigDeviceHandleByIndex(nv.nvmlDeviceGetHandleByIndex(int(parent)), int(instance))
    return nv.nvmlDeviceGetHandleByUUID(str(ref))


def clock_event_names(nv: ModuleType, mask: int) -> list[str]:
    """The named clock-event (throttle) reasons set in ``mask``, by pynvml's own constants."""
    names = {
        name.removeprefix(REASON_PREFIXES[0]).removeprefix(REASON_PREFIXES[1])
        for name in dir(nv)
        if name.startswith(REASON_PREFIXES) and not name.endswith(("All", "None"))
        and isinstance(getattr(nv, name), int) and getattr(nv, name) & mask
    }
    return sorted(names - {"UserDefinedClocks"})  # a deprecated alias of ApplicationsClocksSetting


def _call(fn: Any, *args: Any) -> Any:
    """One NVML read; None where the device does not support it or it fails."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: the field is absent, not zero
        return None


def _pids(nv: ModuleType, handle: Any) -> set[int] | None:
    got = [_call(nv.nvmlDeviceGetComputeRunningProcesses, handle),
           _call(nv.nvmlDeviceGetGraphicsRunningProcesses, handle)]
    if all(g is None for g in got):
        return None
    return {int(p.pid) for g in got for p in (g or [])}


def _reasons_mask(nv: ModuleType, handle: Any) -> int | None:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return _call(fn, handle)


def _name(nv: ModuleType, handle: Any) -> str | None:
    value = _call(nv.nvmlDeviceGetName, handle)
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class IdleCheck:
    """Each device before the server starts: memory in use (the baseline), processes on it, clock-event reasons."""

    devices: tuple[dict[str, Any], ...] = ()
    problems: tuple[str, ...] = ()  # a shared or throttled device, one line each
    missing: str | None = None  # why nothing could be read (no NVML here)

    def baseline_bytes(self) -> dict[str, int]:
        return {d["device"]: d["memory_used_bytes"] for d in self.devices if d.get("memory_used_bytes") is not None}

    def warning(self) -> str | None:
        """The one line a person reads before the run: what is not idle, and why it matters."""
        if not self.problems:
            return None
        return "GPU not idle before the server start: " + "; ".join(self.problems) + " (the arms will be INVALID)"

    def to_dict(self) -> dict[str, Any]:
        return {"devices": [dict(d) for d in self.devices], "problems": list(self.problems), "missing": self.missing}


def idle_check(devices: Sequence[DeviceRef], nvml: ModuleType | None = None) -> IdleCheck:
    """Read each device before a server starts; never raises (an unreadable NVML is ``missing``)."""
    nv, why = load_nvml(nvml)
    if nv is None:
        return IdleCheck(missing=why)
    try:
        rows, problems = [], []
        for ref in devices:
            handle = device_handle(nv, ref)
            mem = _call(nv.nvmlDeviceGetMemoryInfo, handle)
            pids = _pids(nv, handle)
            mask = _reasons_mask(nv, handle)
            reasons = clock_event_names(nv, mask) if mask is not None else None
            rows.append({"device": str(ref), "name": _name(nv, handle),
                         "memory_used_bytes": int(mem.used) if mem is not None else None,
                         "processes": sorted(pids) if pids is not None else None, "clock_event_reasons": reasons})
            if pids:
                problems.append(f"device {ref} has {len(pids)} process(es) on it already (pids "
                                f"{', '.join(map(str, sorted(pids)))}): it is shared")
            if throttled := [r for r in reasons or [] if r in THROTTLING]:
                problems.append(f"device {ref} clocks held down by {', '.join(throttled)}")
        return IdleCheck(tuple(rows), tuple(problems))
    except Exception as exc:  # noqa: BLE001 - a device that cannot be opened: say so instead of a baseline
        return IdleCheck(missing=f"NVML could not read device(s) {', '.join(map(str, devices))}: {exc}")
    finally:
        _shutdown(nv)


@dataclass
class _Device:
    """One device's running figures while the sampler runs."""

    ref: str
    handle: Any
    name: str | None
    pids_at_start: set[int] | None
    energy_start_mj: int | None
    memory_start_bytes: int | None = None
    memory_peak_bytes: int | None = None
    power: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, W)
    sm_mhz: list[int] = field(default_factory=list)
    mem_mhz: list[int] = field(default_factory=list)
    util_gpu: list[int] = field(default_factory=list)
    util_mem: list[int] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> samples it was set in
    samples: int = 0

    def read(self, nv: ModuleType) -> None:
        mem = _call(nv.nvmlDeviceGetMemoryInfo, self.handle)
        if mem is not None:
            self.memory_peak_bytes = max(self.memory_peak_bytes or 0, int(mem.used))
        if (mw := _call(nv.nvmlDeviceGetPowerUsage, self.handle)) is not None:
            self.power.append((time.monotonic(), mw / 1000.0))
        for values, kind in ((self.sm_mhz, nv.NVML_CLOCK_SM), (self.mem_mhz, nv.NVML_CLOCK_MEM)):
            if (mhz := _call(nv.nvmlDeviceGetClockInfo, self.handle, kind)) is not None:
                values.append(int(mhz))
        if (util := _call(nv.nvmlDeviceGetUtilizationRates, self.handle)) is not None:
            self.util_gpu.append(int(util.gpu))
            self.util_mem.append(int(util.memory))
        if (mask := _reasons_mask(nv, self.handle)) is not None:
            for reason in clock_event_names(nv, mask):
                self.reasons[reason] = self.reasons.get(reason, 0) + 1
        self.samples += 1


def _stats(values: Sequence[float], digits: int = 1) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": round(min(values), digits), "mean": round(sum(values) / len(values), digits),
            "max": round(max(values), digits)}


def integrated_j(power: Sequence[tuple[float, float]]) -> float | None:
    """Energy from power readings: the trapezoid rule over (s, W) pairs; None with fewer than two readings."""
    if len(power) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(power, power[1:], strict=False))


@dataclass
class GpuSampler:
    """Sample ``devices`` every ``interval_s`` from ``start`` to ``stop``; ``stop`` returns the run's telemetry."""

    devices: Sequence[DeviceRef]
    interval_s: float = 0.1
    baseline: Mapping[str, int] | None = None  # memory in use before the server started, by device
    nvml: ModuleType | None = None
    failures: int = 0
    _nv: ModuleType | None = None
    _missing: str | None = None
    _rows: list[_Device] = field(default_factory=list)
    _loop: Periodic | None = None
    _t0: float = 0.0

    def start(self) -> GpuSampler:
        self._nv, self._missing = load_nvml(self.nvml)
        if self._nv is None:
            return self
        nv = self._nv
        try:
            for ref in self.devices:
                handle = device_handle(nv, ref)
                mem = _call(nv.nvmlDeviceGetMemoryInfo, handle)
                self._rows.append(_Device(str(ref), handle, _name(nv, handle), _pids(nv, handle),
                                          _call(nv.nvmlDeviceGetTotalEnergyConsumption, handle),
                                          int(mem.used) if mem is not None else None))
        except Exception as exc:  # noqa: BLE001 - a device that cannot be opened: the run goes on without telemetry
            self._missing, self._rows = f"NVML could not open device(s) {', '.join(map(str, self.devices))}: {exc}", []
            _shutdown(nv)
            self._nv = None
            return self
        self._t0 = time.monotonic()
        self._loop = Periodic(self._sample, self.interval_s, "infkit-gpu-sampler").start()
        return self

    def _sample(self) -> None:
        assert self._nv is not None
        for row in self._rows:
            try:
                row.read(self._nv)
            except Exception:  # noqa: BLE001 - one failed sample is counted, never mistaken for zero
                self.failures += 1

    def stop(self) -> dict[str, Any]:
        """Stop sampling and summarise: ``{"missing": reason}`` where NVML could not be read."""
        if self._nv is None:
            return {"missing": self._missing or "no GPU device was sampled"}
        ended = self._loop.stop(max(5.0, 10 * self.interval_s)) if self._loop is not None else True
        nv = self._nv
        try:
            if ended:  # a thread hung in an NVML call keeps its figures; a last sample would race it
                self._sample()
            window_s = time.monotonic() - self._t0
            rows = [self._summary(nv, row) for row in self._rows]
        finally:
            _shutdown(nv)
        return {"interval_s": self.interval_s, "window_s": round(window_s, 3), "failed_samples": self.failures,
                "baseline": "pre_start_idle" if self.baseline is not None else "run_start", "devices": rows}

    def _summary(self, nv: ModuleType, row: _Device) -> dict[str, Any]:
        end = _call(nv.nvmlDeviceGetTotalEnergyConsumption, row.handle)
        if row.energy_start_mj is not None and end is not None and end >= row.energy_start_mj:
            energy_j, source = (end - row.energy_start_mj) / 1000.0, ENERGY_COUNTER
        else:
            energy_j, source = integrated_j(row.power), POWER_INTEGRATED
        # no pre-start reading (a server started elsewhere): memory in use at the run's start is the reference
        idle = row.memory_start_bytes if self.baseline is None else self.baseline.get(row.ref)
        pids = _pids(nv, row.handle)
        foreign = sorted(pids - row.pids_at_start) if pids is not None and row.pids_at_start is not None else []
        watts = [w for _, w in row.power]
        return {
            "device": row.ref, "name": row.name, "samples": row.samples,
            "memory_idle_bytes": idle, "memory_peak_bytes": row.memory_peak_bytes,
            "memory_peak_minus_idle_bytes": (max(0, row.memory_peak_bytes - idle)
                                             if row.memory_peak_bytes is not None and idle is not None else None),
            "power_w": _stats(watts), "energy_j": round(energy_j, 3) if energy_j is not None else None,
            "energy_source": source if energy_j is not None else None,
            "sm_clock_mhz": _stats(row.sm_mhz, 0), "memory_clock_mhz": _stats(row.mem_mhz, 0),
            "utilization_gpu_pct": _stats(row.util_gpu), "utilization_memory_pct": _stats(row.util_mem),
            "clock_event_reasons": dict(sorted(row.reasons.items())),
            "processes_at_start": sorted(row.pids_at_start) if row.pids_at_start is not None else None,
            "processes_started_during_run": foreign,
        }


def gpu_reasons(telemetry: Mapping[str, Any] | None, idle: IdleCheck | None) -> list[str]:
    """Why the run's GPU figures describe the machine rather than the engine: a shared or throttled device."""
    reasons = [f"GPU not idle before the server start: {p}" for p in (idle.problems if idle else ())]
    for row in (telemetry or {}).get("devices", []):
        throttled = {r: n for r, n in row["clock_event_reasons"].items() if r in THROTTLING}
        if throttled:
            seen = ", ".join(f"{r} in {n} of {row['samples']} samples" for r, n in throttled.items())
            reasons.append(f"GPU {row['device']} throttled during the run ({seen}): the figures measure its cooling "
                           "or power delivery")
        if row["processes_started_during_run"]:
            pids = ", ".join(map(str, row["processes_started_during_run"]))
            reasons.append(f"GPU {row['device']} shared: process(es) {pids} started on it during the run")
    return reasons
