"""The samplers that run beside the client during a measured run: host memory, and GPU telemetry or CPU energy.

Each runs in a daemon thread of the measuring process; the client's requests go out from its own worker
processes, so no sampler can hold a send back. On a GPU run (``gpu_devices`` given) NVML is sampled on those
devices; otherwise the host's RAPL package counters are read where the host exposes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.serving.energy import EnergyInputs, kv_cache_info
from harness.telemetry import PeakSampler
from harness.telemetry.gpu_sampler import DeviceRef, GpuSampler, IdleCheck
from harness.telemetry.prometheus import Snapshot
from harness.telemetry.rapl import RaplMeter


@dataclass
class RunSamplers:
    """Start together before the client, stop together after it (also when the run is interrupted)."""

    memory_probe: Callable[[], int | None] | None = None
    gpu_devices: Sequence[DeviceRef] = ()
    gpu_idle: IdleCheck | None = None
    gpu_interval_s: float = 0.1
    rapl_root: Path | str | None = None
    usd_per_gpu_hour: float | None = None
    _peak: PeakSampler | None = None
    _gpu: GpuSampler | None = None
    _rapl: RaplMeter | None = None
    _stopped: dict[str, Any] = field(default_factory=dict)

    def start(self) -> RunSamplers:
        self._peak = PeakSampler(self.memory_probe).start() if self.memory_probe else None
        if self.gpu_devices:
            baseline = self.gpu_idle.baseline_bytes() if self.gpu_idle and not self.gpu_idle.missing else None
            self._gpu = GpuSampler(self.gpu_devices, self.gpu_interval_s, baseline).start()
        elif self.rapl_root is not None:
            self._rapl = RaplMeter(Path(self.rapl_root)).start()
        return self

    def stop(self) -> None:
        """Stop every sampler that runs (idempotent: a second call keeps the first readings)."""
        if self._stopped:
            return
        self._stopped = {
            "peak": self._peak.stop() if self._peak else None,
            "gpu": self._gpu.stop() if self._gpu else None,
            "rapl": self._rapl.stop() if self._rapl else None,
        }

    @property
    def peak_bytes(self) -> int | None:
        return self._stopped.get("peak")

    def energy_inputs(self, before: Snapshot | None) -> EnergyInputs:
        """What the result's energy and device-memory groups are built from (``before``: the first /metrics)."""
        return EnergyInputs(gpu=self._stopped.get("gpu"), rapl=self._stopped.get("rapl"), idle=self.gpu_idle,
                            usd_per_gpu_hour=self.usd_per_gpu_hour, kv=kv_cache_info(before))
