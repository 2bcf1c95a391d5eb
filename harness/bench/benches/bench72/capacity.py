"""Capacity under SLOs as bench steps: the SLOs, each probe's verdict, the searches and the paired duel.

A probe is one measured arm run: the bench's fixed request list with Poisson arrivals at
one rate on one candidate server. It *passes* when the client kept its schedule (a run
whose client fell behind describes the client, so it can never pass), the share of
requests that did not complete is within the error-rate limit, and the run's P99 TTFT and
P99 TPOT are within their limits. Steps are made while the bench runs: each candidate's
search (``harness.bench.lib.search``) reads the verdicts of its earlier probes to choose
the next rate; the duel runs the two best candidates interleaved at the leader's capacity.

Everything is read back from the arm runs in the History (``notes`` only maps labels to
candidates and rates), so an interrupted bench reads exactly what it measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.bench.lib.search import Capacity, Probe, SearchConfig, binding, capacity, next_rate
from harness.bench.metrics import (
    PEAK_MEMORY_GIB,
    REQUEST_RATE,
    TPOT_P99,
    TTFT_P99,
    server_metric,
)
from harness.bench.records import ArmRun
from harness.bench.spec import Arm, History, Step, WorkloadPlan
from harness.workload import Arrival, Common

TTFT, TPOT, ERRORS, CLIENT = "TTFT P99", "TPOT P99", "error rate", "client schedule"
LIGHT = "light load"
KV_USAGE_PEAK = server_metric("kv_cache_usage_peak")
RUNNING_PEAK = server_metric("running_peak")


@dataclass(frozen=True)
class SLO:
    """The limits every probe is held to, and how they were chosen."""

    ttft_p99_ms: float
    tpot_p99_ms: float
    error_rate: float
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        return (f"P99 TTFT <= {self.ttft_p99_ms:.0f} ms, P99 TPOT <= {self.tpot_p99_ms:.1f} ms, "
                f"errors <= {self.error_rate:.1%}")


@dataclass(frozen=True)
class LightLoad:
    """Light-load figures the SLOs scale from: a cited bench-66 run's, or this bench's own probe."""

    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    rate_rps: float | None  # a rate known to be served (bench-66's saturation point, or the probe's)
    source: str


def scaled_slo(cfg: Any, light: LightLoad | None) -> SLO | None:
    """Explicit limits win; the others are the light-load P99 times the factors; None while one is missing."""
    parts, basis = {}, []
    for key, factor, name in (("ttft_p99_ms", cfg.slo_ttft_factor, "TTFT"), ("tpot_p99_ms", cfg.slo_tpot_factor, "TPOT")):
        given = getattr(cfg, f"slo_{key}")
        measured = getattr(light, key) if light else None
        if given is not None:
            parts[key] = given
            basis.append(f"P99 {name} {given:g} ms as set (--slo-{key.replace('_', '-')})")
        elif measured:
            parts[key] = factor * measured
            basis.append(f"P99 {name} {factor:g} x {measured:.1f} ms")
        else:
            return None
    source = f" ({light.source})" if light and any(getattr(cfg, f"slo_{k}") is None for k in parts) else ""
    return SLO(error_rate=cfg.slo_error_rate, basis="; ".join(basis) + source, **parts)


def cited_light_load(result: Mapping[str, Any] | None, source: str) -> LightLoad | None:
    """bench-66's light-load P99s and saturation rate from its sweep result (details.baseline)."""
    baseline = ((result or {}).get("details") or {}).get("baseline") or {}
    light = baseline.get("light_load") or {}
    latency = light.get("latency_ms") or {}
    if not latency.get(TTFT_P99.name) or not latency.get(TPOT_P99.name):
        return None
    served = (baseline.get("saturation") or {}).get("offered_rps") or light.get("offered_rps")
    return LightLoad(latency[TTFT_P99.name], latency[TPOT_P99.name], served, source)


def verdict(run: ArmRun, slo: SLO, rate: float) -> Probe:
    """Pass or fail of one probe against every limit, with the figures it was judged on."""
    sent = len(run.records) or 1
    errors = (len(run.records) - run.completed) / sent
    ttft, tpot = TTFT_P99.value([run]), TPOT_P99.value([run])
    client = list(((run.result.get("details") or {}).get("client") or {}).get("schedule_reasons") or [])
    violated = [CLIENT] if client else []
    if errors > slo.error_rate:
        violated.append(ERRORS)
    if ttft is not None and ttft > slo.ttft_p99_ms:
        violated.append(TTFT)
    if tpot is not None and tpot > slo.tpot_p99_ms:
        violated.append(TPOT)
    passed = not violated and ttft is not None and tpot is not None
    detail = {"repeat": run.repeat, "ttft_p99_ms": ttft, "tpot_p99_ms": tpot, "error_rate": round(errors, 4),
              "achieved_rps": REQUEST_RATE.of_run(run), "client_reasons": client,
              "peak_memory_gib": PEAK_MEMORY_GIB.of_run(run), "kv_cache_usage_peak": KV_USAGE_PEAK(run),
              "running_peak": RUNNING_PEAK(run)}
    return Probe(rate, passed, tuple(violated), detail)


@dataclass(frozen=True)
class Searched:
    """One candidate's search as read from its probes."""

    name: str
    probes: tuple[Probe, ...]
    capacity: Capacity
    binding: tuple[str, ...]
    binding_rate_rps: float | None

    def at(self, rate: float | None) -> list[Probe]:
        return [p for p in self.probes if p.rate_rps == rate]

    def peak(self, key: str) -> float | None:
        """The largest ``key`` over the runs at capacity (over every run when nothing held)."""
        runs = self.at(self.capacity.capacity_rps) or list(self.probes)
        values = [p.detail.get(key) for p in runs if p.detail.get(key) is not None]
        return max(values) if values else None


class Campaign:
    """The steps of bench-72 as functions of the History, for any set of candidate server variants."""

    def __init__(self, cfg: Any, candidates: Sequence[str], light: LightLoad | None):
        self.cfg, self.candidates, self.light = cfg, tuple(candidates), light

    def request_list(self, arrival: Arrival, seed: int | None = None) -> Common:
        cfg = self.cfg
        return Common(arrival=arrival, seed=cfg.seed if seed is None else seed, requests=cfg.requests * cfg.scale,
                      input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens, input_range=cfg.length_range,
                      output_range=cfg.length_range)

    def rate_workload(self, rate: float) -> WorkloadPlan:
        """The request list at ``rate``, lengthened so its arrivals span at least --probe-seconds (the
        generator is sequential: a longer list starts with the same requests)."""
        plan = self.request_list(Arrival("poisson", rate_rps=rate))
        requests = max(plan.requests, math.ceil(rate * self.cfg.probe_seconds))
        return WorkloadPlan(f"rate-{rate:g}", "random", replace(plan, requests=requests))

    def search_config(self, start_rps: float) -> SearchConfig:
        cfg = self.cfg
        return SearchConfig(start_rps=start_rps, growth=cfg.growth, rel_tol=cfg.rel_tol, repeats=cfg.repeats,
                            max_probes=cfg.max_probes, min_rps=cfg.min_rps, max_rps=cfg.max_rps)

    def slo(self, history: History) -> SLO | None:
        return scaled_slo(self.cfg, history.notes.get("light") or self.light)

    def searched(self, history: History, name: str) -> Searched | None:
        """``name``'s search read from its probe runs (None before the SLOs are known)."""
        slo, labels = self.slo(history), history.notes.get("probes", {})
        if slo is None:
            return None
        probes = tuple(verdict(run, slo, labels[run.label]["rate_rps"]) for run in history.runs
                       if run.label in labels and labels[run.label]["candidate"] == name and not run.failure)
        names, rate = binding(probes)  # the start rate does not change how probes are read
        return Searched(name, probes, capacity(self.search_config(1.0), probes), names, rate)

    def light_steps(self, history: History, server: str) -> Iterator[Step]:
        """A light-load probe (one request at a time) when no cited run gives the SLOs or a start rate."""
        if self.slo(history) is not None and (self.cfg.start_rps or self.light):
            return
        light = replace(self.request_list(Arrival("closed", concurrency=1)), requests=self.cfg.light_requests)
        arm = Arm(LIGHT, WorkloadPlan("light", "random", light), server)
        yield 1, arm
        run = next((r for r in history.of(LIGHT) if not r.failure), None)
        if run is not None:
            caveat = "" if run.valid else f"; the probe was invalid: {'; '.join(run.result['conclusion']['invalid_reasons'])}"
            history.notes["light"] = LightLoad(
                TTFT_P99.value([run]), TPOT_P99.value([run]), REQUEST_RATE.of_run(run),
                f"a light-load probe on {server}: {run.completed} requests one at a time; no bench-66 run was "
                f"cited{caveat}")

    def start_rps(self, history: History) -> float | None:
        """Where a search starts: the capacity of a candidate already searched, else a rate known to be served."""
        found = [s.capacity.capacity_rps for s in (self.searched(history, n) for n in self.candidates)
                 if s is not None and s.capacity.capacity_rps]
        light = history.notes.get("light") or self.light
        return self.cfg.start_rps or (max(found) if found else None) or (light.rate_rps if light else None)

    def search(self, history: History, name: str, first: bool) -> Iterator[Step]:
        """One candidate's capacity search; the first candidate's starts with the light-load probe if needed."""
        if first:
            yield from self.light_steps(history, name)
        start = self.start_rps(history)
        slo = self.slo(history)
        if slo is None or start is None:
            return
        history.notes.setdefault("start_rps", {})[name] = start
        search, probes = self.search_config(start), []
        while (rate := next_rate(search, probes)) is not None:
            arm = Arm(f"{name} rate={rate:g}/s", self.rate_workload(rate), name)
            history.notes.setdefault("probes", {})[arm.label] = {"candidate": name, "rate_rps": rate}
            done = len(history.runs)
            yield len(history.of(arm.label)) + 1, arm
            if len(history.runs) == done:  # the engine refused this variant: nothing to search
                return
            probes.append(verdict(history.runs[-1], slo, rate))

    def steps(self, history: History) -> Iterator[Step]:
        """Every candidate's search in grid order, then the duel of the top two."""
        for i, name in enumerate(self.candidates):
            yield from self.search(history, name, i == 0)
        yield from self.duel(history)

    def keep(self, history: History) -> list[str]:
        """Servers to keep up besides the next step's: the best so far while searching, the pair in the duel."""
        duel = history.notes.get("duel")
        return [duel["leader"], duel["runner_up"]] if duel else [s.name for s in self.ranked(history)[:1]]

    def ranked(self, history: History) -> list[Searched]:
        """Searched candidates, best first: higher capacity, then lower peak memory at capacity, then grid order."""
        found = [s for s in (self.searched(history, n) for n in self.candidates) if s is not None and s.probes]
        return sorted(found, key=lambda s: (-(s.capacity.capacity_rps or 0.0), s.peak("peak_memory_gib") or 0.0,
                                            self.candidates.index(s.name)))

    def duel(self, history: History) -> Iterator[Step]:
        """The top two at the leader's capacity, interleaved A B / B A by round over the repeats."""
        top = self.ranked(history)[:2]
        if len(top) < 2 or top[0].capacity.capacity_rps is None:
            return
        rate = top[0].capacity.capacity_rps
        history.notes["duel"] = {"leader": top[0].name, "runner_up": top[1].name, "rate_rps": rate}
        for r in range(1, self.cfg.repeats + 1):
            for s in (top if r % 2 else top[::-1]):
                yield r, Arm(duel_label(s.name), self.rate_workload(rate), s.name)


def duel_label(name: str) -> str:
    return f"duel {name}"
