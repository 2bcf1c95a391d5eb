"""Loads on a GPU come from a measured capacity, never from the CPU reference host's constants.

The CPU default's loads (bench-70's bursty 1 req/s list of 16 and closed loop of 8, bench-81's 8 in flight per
device, bench-69's one request at a time) are sized on the reference host (``hostprofile``); on a GPU nothing queues
at them and a scheduler comparison reads a null effect. On a GPU backend a bench whose load knob is unset takes the
load from a cited bench-66 run of the same backend, model and device (its saturation point and the requests in
flight there, carried to the bench's request shape by the cited run's own prefill and decode rates), else from a
closed-loop capacity probe it runs first on its first server (bench-66's, ``LoadSweep.probe``). Either way the plan's
notes and the result say "load from ...". CPU backends keep their named sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.lib.citations import Citation, cite_choice, cited_saturation, setup_mismatch
from harness.bench.lib.hostprofile import idle_request_s
from harness.bench.metrics import E2E_P50, TPOT_P50, TTFT_P50
from harness.bench.placement import GPU_BACKENDS, Placement
from harness.contract.result import Result
from harness.errors import CapabilityMissing, InvalidInput
from harness.models import PreparedModel
from harness.rundir.fingerprint import host_info
from harness.runtime.gpus import device_name

BASELINE_ID = "INF-FLOAT-BASELINE"


def this_device(placement: Placement) -> str | None:
    """The device this run measures: the first GPU's NVML name (None where NVML cannot say), or the CPU model."""
    if not placement.gpus:
        return str(host_info()["cpu_model"])
    try:
        return device_name(placement.gpus[0])
    except CapabilityMissing:
        return None


def cited_bench66(choice: str, knob: str, placement: Placement,
                  model: PreparedModel) -> tuple[Citation | None, str | None]:
    """The bench-66 run ``choice`` names (a path, latest or none), and a note when the newest was passed over: a run
    of another backend, model or device says nothing of this setup's capacity, so one named by ``knob`` is an input
    error."""
    citation = cite_choice(choice, Path.cwd(), BASELINE_ID)
    if citation is None:
        return None, None
    why = setup_mismatch(citation, backend=placement.backend, model_version=model.model_ref.get("version"),
                         device=this_device(placement), gpu=bool(placement.gpus))
    if why is None:
        return citation, None
    if choice != "latest":
        raise InvalidInput(f"{knob} {choice}: that bench-66 run measured another setup: {why}",
                           hint=f"cite a bench-66 run of this backend, model and device, or {knob} none")
    return None, f"the newest bench-66 run ({citation.manifest}) is not cited: {why}"


def cited_shape(result: Result | None) -> tuple[int, int] | None:
    """A cited run's request shape: its workload's mean prompt and output tokens."""
    if result is None:
        return None
    return round(result.workload.input_tokens["mean"]), round(result.workload.output_tokens["mean"])


def measured_rates(result: Result | None) -> tuple[float, float] | None:
    """The cited run's own prefill and single-stream decode rates (tokens/s) from its light-load level: its mean
    prompt over the TTFT P50, and 1 / the TPOT P50. None where it has no light-load level or no shape."""
    latency = (result.detail("baseline", "light_load", "latency_ms") if result else None) or {}
    shape = cited_shape(result)
    ttft_ms, tpot_ms = latency.get(TTFT_P50.name), latency.get(TPOT_P50.name)
    if shape is None or not ttft_ms or not tpot_ms:
        return None
    return shape[0] / (ttft_ms / 1000), 1000 / tpot_ms


def carried_rate(rate_rps: float, result: Result | None,
                 target: tuple[int, int]) -> tuple[float | None, str]:
    """A cited GPU run's rate carried to a request shape by that run's own measured prefill and decode rates (the
    reference host's rates say nothing of a GPU), or None and why it is left uncarried."""
    shape, rates = cited_shape(result), measured_rates(result)
    if shape == target:
        return rate_rps, ""
    if shape is None or rates is None:
        return None, ("left uncarried: the cited run records no light-load TTFT and TPOT to carry it to "
                      f"{target[0]}+{target[1]}-token requests")
    ratio = idle_request_s(*rates, *shape) / idle_request_s(*rates, *target)
    rate = round(rate_rps * ratio, 3)
    return rate, (f"{rate_rps:.4g} req/s x {ratio:.3g}, a {shape[0]}+{shape[1]}-token request's idle cost over a "
                  f"{target[0]}+{target[1]}-token one's at the cited run's own prefill {rates[0]:.4g} and decode "
                  f"{rates[1]:.4g} tokens/s = {rate:g} req/s")


@dataclass(frozen=True)
class Capacity:
    """A measured capacity in a bench's request shape: the saturation rate and the requests in flight there."""

    rate_rps: float
    in_flight: float  # Little's law at the saturation point: its achieved rate x its E2E P50
    source: str  # "load from ...": the cited run or the probe, and how its figures were carried

    def to_dict(self) -> dict[str, Any]:
        return {"rate_rps": self.rate_rps, "in_flight": self.in_flight, "source": self.source}


def cited_capacity(citation: Citation, target: tuple[int, int]) -> tuple[Capacity | None, str]:
    """The cited bench-66 run's capacity in ``target``'s shape, or None and why it cannot give one."""
    point, weak = cited_saturation(citation.result)
    if point is None:
        return None, weak
    rate = point.get("offered_rps") or point.get("scheduled_rps")
    e2e_ms = (point.get("latency_ms") or {}).get(E2E_P50.name)
    if not rate or not e2e_ms:
        return None, "its saturation point records no rate or E2E P50"
    in_flight = (point.get("achieved_rps") or rate) * e2e_ms / 1000
    carried, how = carried_rate(float(rate), citation.result, target)
    if carried is None:
        return None, f"its saturation point {rate:.4g} req/s is {how}"
    run = citation.run
    return Capacity(carried, round(in_flight, 2), (
        f"load from bench-66 run {run.run_id} ({citation.manifest}, sha256 {citation.sha256[:12]}): "
        f"saturation {how or f'{carried:g} req/s'}, {in_flight:.3g} requests in flight there (its achieved rate x "
        f"E2E P50)")), ""


@dataclass(frozen=True)
class GpuLoad:
    """Where a GPU run's load comes from: a cited capacity, else a probe the bench runs first (why is stated)."""

    capacity: Capacity | None
    probe_why: str  # why the bench probes itself ('' when a capacity is cited)
    passed_over: str | None = None  # the newest bench-66 run, when it measured another setup

    @property
    def notes(self) -> tuple[str, ...]:
        source = self.capacity.source if self.capacity else (
            f"load from a closed-loop capacity probe on the first server before any arm ({self.probe_why})")
        return (*([self.passed_over] if self.passed_over else []), source)


def gpu_load(choice: str, knob: str, placement: Placement, model: PreparedModel,
             shape: tuple[int, int]) -> GpuLoad | None:
    """The load source of a GPU run (None on CPU backends: their named sizes stand)."""
    if placement.backend not in GPU_BACKENDS:
        return None
    citation, passed_over = cited_bench66(choice, knob, placement, model)
    if citation is None:
        return GpuLoad(None, "no bench-66 run of this backend, model and device is cited", passed_over)
    capacity, weak = cited_capacity(citation, shape)
    if capacity is None:
        return GpuLoad(None, f"bench-66 run {citation.run.run_id} is not used: {weak}", passed_over)
    return GpuLoad(capacity, "", passed_over)


def probed_capacity(probe: dict[str, Any] | None) -> Capacity | None:
    """A capacity from the closed-loop probe's record (``LoadSweep.probe``): its steady rate, with its concurrency
    in flight (a closed loop keeps it there)."""
    if not probe or not probe.get("rps"):
        return None
    return Capacity(round(float(probe["rps"]), 3), float(probe["concurrency"]), (
        f"load from a closed-loop capacity probe on server {probe.get('server')}: {probe['rps']:.4g} req/s at "
        f"{probe['concurrency']} in flight over a {probe.get('window_s')} s steady window"))

