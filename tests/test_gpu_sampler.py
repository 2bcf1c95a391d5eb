"""GPU telemetry through the real pynvml over a fake NVML C library; RAPL over a fake powercap tree."""

from __future__ import annotations

import time
from pathlib import Path

import pynvml
import pytest
from fake_nvml import FakeDevice, FakeNvmlLib, install

from harness.rundir.fingerprint import gpu_info
from harness.telemetry.gpu_sampler import (
    ENERGY_COUNTER,
    POWER_INTEGRATED,
    GpuSampler,
    gpu_reasons,
    idle_check,
    integrated_j,
    load_nvml,
)
from harness.telemetry.rapl import RaplMeter, package_zones

GiB = 2**30
MIG = "MIG-4f2a7c1e-0b1d-5e6f-9a8b-7c6d5e4f3a2b"


def _two_devices() -> list[FakeDevice]:
    return [
        FakeDevice("GPU-aaaa", used_bytes=[GiB // 2, 20 * GiB, 61 * GiB, 40 * GiB], energy_mw_rate=350_000,
                   reasons=pynvml.nvmlClocksEventReasonSwPowerCap),
        FakeDevice(MIG, name="NVIDIA H100 MIG 3g.40gb", used_bytes=[GiB // 4, 9 * GiB], energy_mj=None,
                   power_mw=120_000, sm_mhz=1410),
    ]


def test_sampler_reads_memory_power_energy_clocks_and_events_through_pynvml(monkeypatch):
    lib = install(monkeypatch, FakeNvmlLib(_two_devices()))
    idle = idle_check([0, MIG])
    assert idle.problems == () and idle.baseline_bytes() == {"0": GiB // 2, MIG: GiB // 4}
    sampler = GpuSampler([0, MIG], interval_s=0.01, baseline=idle.baseline_bytes()).start()
    time.sleep(0.15)
    got = sampler.stop()
    first, mig = got["devices"]
    assert got["baseline"] == "pre_start_idle" and got["interval_s"] == 0.01 and got["failed_samples"] == 0
    assert first["memory_peak_bytes"] == 61 * GiB and first["memory_peak_minus_idle_bytes"] == 61 * GiB - GiB // 2
    assert mig["memory_peak_minus_idle_bytes"] == 9 * GiB - GiB // 4
    # the counter advanced 350 W x the window: the delta of nvmlDeviceGetTotalEnergyConsumption, in J
    assert first["energy_source"] == ENERGY_COUNTER
    assert first["energy_j"] == pytest.approx(350 * got["window_s"], rel=0.15)
    # no counter on the MIG instance: 120 W integrated over its samples
    assert mig["energy_source"] == POWER_INTEGRATED and mig["energy_j"] == pytest.approx(120 * got["window_s"], rel=0.3)
    assert first["power_w"] == {"min": 350.0, "mean": 350.0, "max": 350.0}
    assert first["sm_clock_mhz"]["max"] == 1980 and mig["sm_clock_mhz"]["min"] == 1410
    assert first["memory_clock_mhz"]["mean"] == 2619 and first["utilization_gpu_pct"]["mean"] == 97
    assert first["clock_event_reasons"] == {"SwPowerCap": first["samples"]} and first["samples"] >= 3
    assert gpu_reasons(got, idle) == []  # the power cap under load judges nothing
    assert lib.calls["nvmlInitWithFlags"] == lib.calls["nvmlShutdown"] == 2  # the check and the sampler
    assert lib.calls["nvmlDeviceGetCurrentClocksEventReasons"] >= 2 * first["samples"]


def test_idle_check_and_run_name_a_shared_or_throttled_device(monkeypatch):
    devices = _two_devices()
    devices[0].pids = [4242]
    devices[1].reasons = pynvml.nvmlClocksEventReasonSwThermalSlowdown | pynvml.nvmlClocksEventReasonGpuIdle
    install(monkeypatch, FakeNvmlLib(devices))
    idle = idle_check([0, MIG])
    assert idle.devices[0]["processes"] == [4242]
    assert idle.devices[1]["clock_event_reasons"] == ["GpuIdle", "SwThermalSlowdown"]
    assert "device 0 has 1 process(es) on it already (pids 4242)" in idle.warning()
    assert f"device {MIG} clocks held down by SwThermalSlowdown" in idle.warning()
    sampler = GpuSampler([0, MIG], interval_s=0.01).start()
    devices[0].pids = [4242, 5151]  # another process starts on device 0 during the run
    time.sleep(0.05)
    got = sampler.stop()
    # no pre-start baseline given: memory in use at the run's start (the second reading) is the reference
    assert got["baseline"] == "run_start" and got["devices"][0]["memory_idle_bytes"] == 20 * GiB
    reasons = gpu_reasons(got, idle)
    assert any(r.startswith("GPU not idle before the server start: device 0 has 1 process") for r in reasons)
    assert f"GPU {MIG} throttled during the run (SwThermalSlowdown in" in " ".join(reasons)
    assert "GPU 0 shared: process(es) 5151 started on it during the run" in reasons


def test_a_mig_instance_by_parent_and_index_is_the_same_device_as_by_uuid(monkeypatch):
    install(monkeypatch, FakeNvmlLib(_two_devices(), mig_of={0: [1]}))
    by_index, by_uuid = idle_check(["0:0"]), idle_check([MIG])
    assert by_index.devices[0]["name"] == by_uuid.devices[0]["name"] == "NVIDIA H100 MIG 3g.40gb"
    assert "Not Found" in idle_check(["0:1"]).missing


def test_no_driver_is_missing_with_nvmls_own_reason(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(pynvml, "CDLL", no_library)
    nv, why = load_nvml()
    assert nv is None and "NVML could not initialise" in why and "no NVIDIA driver" in why
    assert GpuSampler([0]).start().stop() == {"missing": why}
    assert idle_check([0]).missing == why


def test_unknown_device_uuid_is_missing_not_a_crash(monkeypatch):
    install(monkeypatch, FakeNvmlLib(_two_devices()))
    got = GpuSampler(["MIG-0000"]).start().stop()
    assert "NVML could not open device(s) MIG-0000" in got["missing"] and "Not Found" in got["missing"]


def test_fingerprint_reads_the_same_fake_library(monkeypatch):
    install(monkeypatch, FakeNvmlLib(_two_devices()))
    monkeypatch.setattr(FakeNvmlLib, "nvmlSystemGetDriverVersion",
                        lambda self, buf, n: (setattr(buf, "value", b"580.65.06"), 0)[1], raising=False)
    monkeypatch.setattr(FakeNvmlLib, "nvmlDeviceGetCount_v2",
                        lambda self, ref: (setattr(ref._obj, "value", 2), 0)[1], raising=False)
    monkeypatch.setattr(FakeNvmlLib, "nvmlDeviceGetUUID",
                        lambda self, h, buf, n: (setattr(buf, "value", self._device(h).uuid.encode()), 0)[1],
                        raising=False)
    versions, gpus, why = gpu_info()
    assert why is None and versions["driver_version"] == "580.65.06"
    assert [g["clock_event_reasons"] for g in gpus] == [["SwPowerCap"], []]


def test_power_integration_is_the_trapezoid_rule():
    assert integrated_j([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == pytest.approx(200.0 + 600.0)
    assert integrated_j([(0.0, 100.0)]) is None


def _zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = 1_000_000) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def test_rapl_sums_packages_and_counts_a_wrap(tmp_path):
    p0 = _zone(tmp_path, "intel-rapl:0", "package-0", 900_000)
    p1 = _zone(tmp_path, "intel-rapl:1", "package-1", 10_000)
    _zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside package 0: never added again
    _zone(tmp_path, "intel-rapl:2", "psys", 7)  # the whole platform: would count the packages twice
    meter = RaplMeter(tmp_path, interval_s=3600).start()
    (p0 / "energy_uj").write_text("990000\n")
    meter._advance()
    (p0 / "energy_uj").write_text("40000\n")  # wrapped: 10 000 to the top, then 40 000
    (p1 / "energy_uj").write_text("2010000\n")
    got = meter.stop()
    assert got["source"] == "rapl_energy_uj"
    assert [d["name"] for d in got["domains"]] == ["package-0", "package-1"]
    assert got["domains"][0] == {"zone": "intel-rapl:0", "name": "package-0", "energy_j": 0.14, "wraps": 1}
    assert got["energy_j"] == pytest.approx(0.14 + 2.0)


def test_rapl_missing_says_why(tmp_path):
    assert package_zones(tmp_path / "absent")[1] == f"{tmp_path / 'absent'} does not exist: this host exposes no " \
                                                    "RAPL energy counters"
    _zone(tmp_path, "intel-rapl:0", "psys", 1)
    assert "has no intel-rapl package zone" in RaplMeter(tmp_path).start().stop()["missing"]


def test_rapl_readable_only_by_root_is_missing(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", "package-0", 1)
    real_read = Path.read_text

    def read(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read)
    assert "only root may read the RAPL counters" in package_zones(tmp_path)[1]
