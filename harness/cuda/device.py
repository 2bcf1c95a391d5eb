"""Device choice, timing and peak memory shared by every CUDA mechanism experiment.

Timing: CUDA events around each call on a GPU (the device is synchronised once
per sample, after the end event), ``time.perf_counter_ns`` on CPU. Every
timed series is preceded by ``warmup`` untimed calls, and the count is stated
in the result. Percentiles use linear interpolation (numpy's default, the
method named in ``performance.percentile_method``).

Peak memory is measured in a separate, untimed call: on a GPU from the caching
allocator's ``max_memory_allocated`` minus what was allocated before the call;
on CPU by :class:`LiveTensorMeter`, which counts the bytes of every tensor
storage created during the call and alive at the same time.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.contract.distribution import distribution_ms
from harness.errors import CapabilityMissing, InvalidInput


def import_torch():
    """Import torch or raise a one-line ``CapabilityMissing`` that says how to get it."""
    try:
        import torch
    except ImportError as exc:
        raise CapabilityMissing(
            "torch is not installed in this environment", hint="run `make setup-torch`"
        ) from exc
    return torch


def resolve_device(requested: str) -> str:
    """Map ``auto|cpu|cuda`` to the device that will run; ``cuda`` without a GPU is an error."""
    torch = import_torch()
    if requested not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"unknown device {requested!r}; choose auto, cpu or cuda")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise CapabilityMissing(
            "--device cuda was requested but torch sees no CUDA device",
            hint=f"torch {torch.__version__}, CUDA build {torch.version.cuda}; use --device cpu",
        )
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def synchronize(device: str) -> None:
    if device == "cuda":
        import_torch().cuda.synchronize()


@dataclass(frozen=True)
class Timing:
    """One timed series: the raw samples plus how they were taken."""

    samples_ms: tuple[float, ...]
    warmup: int
    clock: str

    def summary(self) -> dict[str, Any]:
        return {**distribution_ms(self.samples_ms), "warmup": self.warmup, "clock": self.clock}


def time_calls(fn: Callable[[], Any], *, device: str, warmup: int, iters: int) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``iters`` times timed."""
    if iters < 1 or warmup < 0:
        raise InvalidInput(f"iters must be >= 1 and warmup >= 0 (got iters={iters}, warmup={warmup})")
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples: list[float] = []
    if device == "cuda":
        torch = import_torch()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(float(start.elapsed_time(end)))
        return Timing(tuple(samples), warmup, "cuda_event")
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return Timing(tuple(samples), warmup, "perf_counter")


class LiveTensorMeter:
    """Count live tensor-storage bytes created inside the ``with`` block (CPU peak memory).

    A ``TorchDispatchMode`` sees every tensor an aten op returns; storages are
    keyed by data pointer so views are not counted twice; an output that
    aliases an input storage allocated before the block (a weight seen through
    a transpose) is not counted at all; and a finalizer on
    each tensor releases its share when Python drops it. Memory held before the
    block (weights) is not counted. With ``cap_bytes`` it raises
    ``torch.OutOfMemoryError`` as soon as live bytes exceed the cap: an
    injected allocator limit that exercises the same recovery path as a GPU OOM.
    """

    def __init__(self, cap_bytes: int | None = None):
        self.cap_bytes = cap_bytes
        self.live_bytes = 0
        self.peak_bytes = 0
        self._storages: dict[int, list[int]] = {}
        self._mode = None

    def _release(self, ptr: int) -> None:
        entry = self._storages.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.live_bytes -= entry[0]
            del self._storages[ptr]

    def _track(self, t: Any, input_ptrs: set[int]) -> None:
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr == 0 or nbytes == 0:
            return
        if ptr in input_ptrs and ptr not in self._storages:
            return  # a view of (or in-place write to) memory that existed before the block, e.g. a weight
        if ptr in self._storages:
            self._storages[ptr][1] += 1
        else:
            self._storages[ptr] = [nbytes, 1]
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(t, self._release, ptr)
        if self.cap_bytes is not None and self.live_bytes > self.cap_bytes:
            torch = import_torch()
            raise torch.OutOfMemoryError(
                f"injected allocator limit: {self.live_bytes} live bytes exceed the cap of {self.cap_bytes}"
            )

    def __enter__(self) -> LiveTensorMeter:
        torch = import_torch()
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        meter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                inputs = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
                input_ptrs = {x.untyped_storage().data_ptr() for x in inputs}
                out = func(*args, **(kwargs or {}))
                for leaf in tree_leaves(out):
                    if isinstance(leaf, torch.Tensor):
                        meter._track(leaf, input_ptrs)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._mode = None


@dataclass(frozen=True)
class MemoryPeak:
    peak_bytes: int
    source: str


def measure_peak_memory(fn: Callable[[], Any], *, device: str) -> MemoryPeak:
    """Peak bytes allocated by one call of ``fn`` above what was allocated before it."""
    gc.collect()
    if device == "cuda":
        torch = import_torch()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return MemoryPeak(int(torch.cuda.max_memory_allocated() - base), "torch_cuda_max_allocated")
    with LiveTensorMeter() as meter:
        fn()
    return MemoryPeak(int(meter.peak_bytes), "torch_live_tensor_bytes")


def free_memory(device: str) -> int:
    """Collect garbage and return cached blocks; the bytes still allocated afterwards (0 on CPU)."""
    gc.collect()
    if device == "cuda":
        torch = import_torch()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return int(torch.cuda.memory_allocated())
    return 0
