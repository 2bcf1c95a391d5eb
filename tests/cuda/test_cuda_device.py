"""Timing, percentiles and the CPU live-tensor meter."""

from __future__ import annotations

import pytest

from harness.cuda.device import (
    LiveTensorMeter,
    measure_peak_memory,
    resolve_device,
    time_calls,
)
from harness.errors import CapabilityMissing, InvalidInput


def test_time_calls_runs_warmup_untimed(torch):
    calls = []
    timing = time_calls(lambda: calls.append(1), device="cpu", warmup=3, iters=5)
    assert len(calls) == 8 and len(timing.samples_ms) == 5
    assert timing.clock == "perf_counter" and timing.summary()["warmup"] == 3


def test_meter_counts_live_bytes_not_weights(torch):
    weight = torch.randn(256, 256)  # allocated before the block: never counted, not even through a view

    def work():
        y = weight.t() @ weight  # 256 KiB
        z = y.relu()  # 256 KiB, y still alive
        del y
        w = z + 1  # 256 KiB, y freed first
        return w.sum()  # 4 bytes

    peak = measure_peak_memory(work, device="cpu")
    assert peak.peak_bytes == 2 * 256 * 256 * 4 + 4
    assert peak.source == "torch_live_tensor_bytes"


def test_meter_cap_raises_oom_and_memory_returns(torch):
    import gc

    x = torch.randn(128, 128)
    meter = LiveTensorMeter(cap_bytes=100_000)

    def work():
        a = x @ x  # 64 KiB fits
        b = a + 1  # a second live 64 KiB does not
        return a, b

    with pytest.raises(torch.OutOfMemoryError, match="injected allocator limit") as info:
        with meter:
            work()
    del info  # its traceback holds the frame that holds `a`
    gc.collect()
    assert meter.peak_bytes == 2 * 128 * 128 * 4
    assert meter.live_bytes == 0


def test_device_choice(torch):
    with pytest.raises(InvalidInput):
        resolve_device("tpu")
    assert resolve_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert resolve_device("auto") == "cpu"
        with pytest.raises(CapabilityMissing, match="no CUDA device"):
            resolve_device("cuda")
