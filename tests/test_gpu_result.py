"""A serving result with GPU telemetry (fake NVML library under the real pynvml, fake OpenAI server) and with RAPL
energy or its absence on the CPU path: schema-valid, each figure with its unit and source."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
from fake_nvml import FakeDevice, FakeNvmlLib, install
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.cli import main
from harness.contract import validate_file
from harness.errors import InvalidInput
from harness.serving.measure import MeasureConfig, measure
from harness.telemetry.gpu_sampler import idle_check
from harness.workload import Arrival, Common, make_workload, write_workload

GiB = 2**30
OUT_TOKENS = 8


@pytest.fixture(scope="module")
def workload(tokenizer_dir, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("workloads")
    return write_workload(d / "closed.jsonl", make_workload(
        "random", Common(arrival=Arrival("closed", concurrency=4), requests=16, input_tokens=16,
                         output_tokens=OUT_TOKENS), {}, tokenizer_dir))


def _cfg(srv: FakeOpenAIServer, workload: Path, out: Path, **kw) -> MeasureConfig:
    return MeasureConfig(endpoint=srv.url, model="fake", workload_path=workload, out_dir=out, ignore_eos=True,
                         backend_name="vllm", profile_id="INF-VLLM-011-CU128", **kw)


def test_gpu_result_carries_device_memory_power_energy_clocks_and_events(monkeypatch, workload, tmp_path):
    device = FakeDevice("GPU-aaaa", used_bytes=[GiB, 30 * GiB, 70 * GiB], energy_mw_rate=400_000, power_mw=400_000,
                        reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    install(monkeypatch, FakeNvmlLib([device]))
    idle = idle_check(["0"])  # before the server start: 1 GiB in use, nothing on the device
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        out = measure(_cfg(srv, workload, tmp_path, gpu_devices=("0",), gpu_idle=idle, gpu_interval_s=0.01,
                           usd_per_gpu_hour=3.0, memory_probe=lambda: 5 * GiB))
    assert validate_file(out.result_path) == [] and out.valid
    perf = out.result["performance"]
    assert perf["peak_memory_bytes"] == 5 * GiB and perf["peak_memory_source"] == "rss_process_tree"  # host RSS
    mem = perf["device_memory"]
    assert mem["source"] == "nvml_device_minus_idle" and mem["baseline"] == "pre_start_idle"
    assert mem["devices"] == [{"device": "0", "memory_idle_bytes": GiB, "memory_peak_bytes": 70 * GiB,
                               "memory_peak_minus_idle_bytes": 69 * GiB}] and mem["peak_minus_idle_bytes"] == 69 * GiB
    assert "no vllm:cache_config_info" in mem["null_reasons"]["kv_cache_memory_bytes"]
    energy = perf["energy"]
    tokens = 16 * OUT_TOKENS
    assert energy["scope"] == "gpu" and energy["source"] == "nvml_energy_counter" and energy["output_tokens"] == tokens
    assert energy["energy_j"] == pytest.approx(400 * energy["window_s"], rel=0.1)
    assert energy["avg_power_w"] == pytest.approx(400, rel=0.1)
    assert energy["energy_per_output_token_j"] == pytest.approx(energy["energy_j"] / tokens, rel=1e-3)
    assert energy["energy_per_request_j"] == pytest.approx(energy["energy_j"] / 16, rel=1e-3)
    assert energy["cost_per_million_output_tokens_usd"] == pytest.approx(
        3.0 * energy["window_s"] / 3600 / tokens * 1e6, rel=1e-3)
    row = perf["gpu_telemetry"]["devices"][0]
    assert row["power_w"]["mean"] == 400.0 and row["sm_clock_mhz"]["max"] == 1980
    assert row["clock_event_reasons"] == {"SwPowerCap": row["samples"]} and row["samples"] >= 2
    assert perf["gpu_telemetry"]["idle_check"]["devices"][0]["processes"] == []
    assert "gpu_idle" not in out.result["details"]["requested"]
    summary = (tmp_path / "summary.txt").read_text()
    assert "energy (gpu, nvml_energy_counter):" in summary and "USD per million output tokens" in summary
    assert "GPU memory over idle (pre_start_idle): 69.00 GiB on 1 device(s)" in summary
    assert f"GPU 0: SM clock 1980 MHz mean, clock events: SwPowerCap {row['samples']}/{row['samples']}" in summary


def test_throttled_gpu_makes_the_run_invalid_with_the_reason(monkeypatch, workload, tmp_path):
    device = FakeDevice("GPU-aaaa", reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown, energy_mj=None)
    install(monkeypatch, FakeNvmlLib([device]))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        out = measure(_cfg(srv, workload, tmp_path, gpu_devices=(0,), gpu_interval_s=0.01))
    assert validate_file(out.result_path) == [] and not out.valid
    assert any(r.startswith("GPU 0 throttled during the run (HwThermalSlowdown in")
               for r in out.result["conclusion"]["invalid_reasons"])
    energy = out.result["performance"]["energy"]
    assert energy["source"] == "nvml_power_integrated"  # no counter on this device: said so
    assert energy["null_reasons"]["cost_per_million_output_tokens_usd"].startswith("no GPU-hour price given")


def test_cpu_run_records_rapl_energy_or_capability_missing(workload, tmp_path):
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    for name, text in (("name", "package-0"), ("energy_uj", "1000"), ("max_energy_range_uj", "262143328850")):
        (zone / name).write_text(text + "\n")
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        got = measure(_cfg(srv, workload, tmp_path / "rapl", rapl_root=tmp_path / "powercap", usd_per_gpu_hour=2.0))
        absent = measure(_cfg(srv, workload, tmp_path / "none", rapl_root=tmp_path / "nowhere"))
    energy = got.result["performance"]["energy"]
    assert energy["scope"] == "cpu_packages" and energy["source"] == "rapl_energy_uj" and energy["energy_j"] == 0.0
    assert "no GPU in this run" in energy["null_reasons"]["cost_per_million_output_tokens_usd"]
    perf = absent.result["performance"]
    assert validate_file(absent.result_path) == [] and perf["energy"] is None
    assert perf["null_reasons"]["energy"] == (f"capability_missing: {tmp_path / 'nowhere'} does not exist: this "
                                              "host exposes no RAPL energy counters")
    assert perf["device_memory"] is None and "host RSS" in perf["null_reasons"]["device_memory"]
    assert "gpu_telemetry" not in perf
    assert "energy: capability_missing: " in (tmp_path / "none" / "summary.txt").read_text()


@pytest.mark.parametrize("kw, message", [({"usd_per_gpu_hour": -1.0}, "--usd-per-gpu-hour -1.0"),
                                         ({"gpu_interval_s": 0.0}, "GPU sampling interval 0.0")])
def test_bad_price_or_interval_is_refused_before_the_run(workload, tmp_path, kw, message):
    with FakeOpenAIServer(FakeConfig()) as srv, pytest.raises(InvalidInput, match=message):
        measure(_cfg(srv, workload, tmp_path / "out", **kw))
    assert not (tmp_path / "out").exists()


def test_cli_run_samples_the_gpus_it_is_given(monkeypatch, workload, tmp_path, capsys):
    install(monkeypatch, FakeNvmlLib([FakeDevice("GPU-aaaa", energy_mw_rate=300_000, power_mw=300_000)]))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        code = main(["run", "--endpoint", srv.url, "--model", "fake", "--workload", str(workload), "--out",
                     str(tmp_path), "--gpu", "0", "--usd-per-gpu-hour", "2.5"])
    assert code == 0, capsys.readouterr().err
    assert validate_file(tmp_path / "result.json") == []
    perf = json.loads((tmp_path / "result.json").read_text())["performance"]
    # a server started elsewhere: its memory at the run's start is the reference, and the label says so
    assert perf["device_memory"]["baseline"] == "run_start"
    assert perf["energy"]["usd_per_gpu_hour"] == 2.5 and perf["energy"]["cost_per_million_output_tokens_usd"] > 0
