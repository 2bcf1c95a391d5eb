"""A serving result's energy, device-memory and GPU-telemetry groups, from what the samplers read during the run.

- ``performance.energy``: joules over the sampled window (GPU: NVML per device, summed; CPU: RAPL packages), the
  average power, energy per output token and per completed request, and with a stated GPU-hour price the cost per
  million output tokens; null with the reason (``capability_missing: ...``) where the host cannot measure it.
- ``performance.device_memory``: each device's NVML memory in use at its peak minus its idle baseline, under its
  own label (``nvml_device_minus_idle``), beside the engine's own KV-cache figure; ``peak_memory_bytes`` keeps the
  host RSS of the server's processes with its own source.
- ``performance.gpu_telemetry``: power, clocks, utilisation and clock-event reasons per device, the idle check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.telemetry.gpu_sampler import IdleCheck
from harness.telemetry.prometheus import Snapshot

DEVICE_MEMORY_SOURCE = "nvml_device_minus_idle"
MEMORY_KEYS = ("memory_idle_bytes", "memory_peak_bytes", "memory_peak_minus_idle_bytes")


@dataclass(frozen=True)
class EnergyInputs:
    """What the run's energy figures are computed from."""

    gpu: Mapping[str, Any] | None  # GpuSampler.stop(); None on the CPU path
    rapl: Mapping[str, Any] | None  # RaplMeter.stop(); None on the GPU path
    idle: IdleCheck | None  # the pre-start check of the GPU devices
    usd_per_gpu_hour: float | None
    kv: Mapping[str, Any] | None = None  # the engine's KV-cache figure (vLLM's cache_config_info), when exported


def kv_cache_info(snap: Snapshot | None) -> dict[str, Any] | None:
    """KV-cache capacity as the engine reports it (vLLM's ``cache_config_info`` labels), or None."""
    for (name, labels), _ in (snap.samples.items() if snap is not None else ()):
        if name == "vllm:cache_config_info":
            info = dict(labels)
            picked: dict[str, Any] = {}
            for key in ("kv_cache_size_tokens", "block_size", "num_gpu_blocks", "kv_cache_memory_bytes"):
                try:
                    picked[key] = int(info[key])
                except (KeyError, ValueError):
                    continue
            picked["enable_prefix_caching"] = info.get("enable_prefix_caching") == "True"
            return picked
    return None


def _gpu_energy(gpu: Mapping[str, Any]) -> tuple[float | None, str | None, str | None]:
    """(joules summed over the devices, the source(s), the reason when some device has none)."""
    rows = gpu["devices"]
    unknown = [r["device"] for r in rows if r["energy_j"] is None]
    if unknown or not rows:
        return None, None, (f"GPU {', '.join(unknown)}: no energy counter and fewer than two power readings"
                            if unknown else "no GPU device was sampled")
    sources = sorted({r["energy_source"] for r in rows})
    return sum(r["energy_j"] for r in rows), "+".join(sources), None


def _cost(inputs: EnergyInputs, gpus: int, window_s: float, tokens: int) -> tuple[float | None, str | None]:
    if inputs.usd_per_gpu_hour is None:
        return None, "no GPU-hour price given (--usd-per-gpu-hour)"
    if not gpus:
        return None, "no GPU in this run: a GPU-hour price does not apply"
    if not tokens:
        return None, "no output tokens"
    return round(inputs.usd_per_gpu_hour * gpus * window_s / 3600 / tokens * 1e6, 6), None


def energy_group(inputs: EnergyInputs, *, output_tokens: int, requests: int) -> tuple[dict[str, Any] | None, str]:
    """(``performance.energy``, ""), or (None, the reason it is null)."""
    reading = inputs.gpu if inputs.gpu is not None else inputs.rapl
    if reading is None:
        return None, "not measured: neither a GPU sampler nor RAPL ran"
    if "missing" in reading:
        return None, f"capability_missing: {reading['missing']}"
    if inputs.gpu is not None:
        energy_j, source, why = _gpu_energy(inputs.gpu)
        scope, gpus = "gpu", len(inputs.gpu["devices"])
    else:
        energy_j, source, why, scope, gpus = reading["energy_j"], reading["source"], None, "cpu_packages", 0
    if energy_j is None:
        return None, f"capability_missing: {why}"
    window_s = float(reading["window_s"])
    cost, cost_why = _cost(inputs, gpus, window_s, output_tokens)
    out: dict[str, Any] = {
        "scope": scope, "source": source, "interval_s": reading["interval_s"], "window_s": window_s,
        "energy_j": round(energy_j, 3), "avg_power_w": round(energy_j / window_s, 3) if window_s > 0 else None,
        "output_tokens": output_tokens, "requests": requests,
        "energy_per_output_token_j": round(energy_j / output_tokens, 6) if output_tokens else None,
        "energy_per_request_j": round(energy_j / requests, 6) if requests else None,
        "gpus": gpus, "usd_per_gpu_hour": inputs.usd_per_gpu_hour, "cost_per_million_output_tokens_usd": cost,
        "null_reasons": {},
    }
    for key, reason in (("energy_per_output_token_j", "no output tokens"),
                        ("energy_per_request_j", "no completed request"), ("avg_power_w", "an empty window"),
                        ("cost_per_million_output_tokens_usd", cost_why)):
        if out[key] is None:
            out["null_reasons"][key] = reason
    if not out["null_reasons"]:
        del out["null_reasons"]
    return out, ""


def device_memory_group(inputs: EnergyInputs) -> tuple[dict[str, Any] | None, str]:
    """(``performance.device_memory``, ""), or (None, the reason it is null)."""
    gpu = inputs.gpu
    if gpu is None:
        return None, "no GPU in this run: the server's memory is peak_memory_bytes (host RSS)"
    if "missing" in gpu:
        return None, f"capability_missing: {gpu['missing']}"
    rows = [{"device": r["device"], **{k: r[k] for k in MEMORY_KEYS}} for r in gpu["devices"]]
    used = [r["memory_peak_minus_idle_bytes"] for r in rows]
    kv = dict(inputs.kv or {})
    out: dict[str, Any] = {
        "source": DEVICE_MEMORY_SOURCE, "baseline": gpu["baseline"], "interval_s": gpu["interval_s"],
        "peak_minus_idle_bytes": sum(used) if None not in used else None, "devices": rows,
        "kv_cache_memory_bytes": kv.get("kv_cache_memory_bytes"), "kv_cache": kv or None, "null_reasons": {},
    }
    if out["peak_minus_idle_bytes"] is None:
        out["null_reasons"]["peak_minus_idle_bytes"] = "a device's memory could not be read"
    if out["kv_cache_memory_bytes"] is None:
        out["null_reasons"]["kv_cache_memory_bytes"] = (
            "the engine's /metrics has no vllm:cache_config_info" if not kv
            else "vllm:cache_config_info carries no kv_cache_memory_bytes (its blocks are in kv_cache)")
    return out, ""


def gpu_telemetry_group(inputs: EnergyInputs) -> dict[str, Any] | None:
    """``performance.gpu_telemetry``: per device power, clocks, utilisation and clock events; None on the CPU path."""
    gpu = inputs.gpu
    if gpu is None:
        return None
    idle = inputs.idle.to_dict() if inputs.idle is not None else None
    if "missing" in gpu:
        return {"missing": gpu["missing"], "idle_check": idle}
    devices = [{k: v for k, v in r.items() if k not in MEMORY_KEYS} for r in gpu["devices"]]
    return {"interval_s": gpu["interval_s"], "window_s": gpu["window_s"], "failed_samples": gpu["failed_samples"],
            "devices": devices, "idle_check": idle}
