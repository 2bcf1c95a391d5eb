"""Capacity under SLOs as bench steps: the SLOs, each probe's verdict, the searches and the paired duel.

A probe is one measured arm run: the bench's fixed request list with Poisson arrivals at
one rate on one candidate server. It *passes* when the client kept its schedule (a run
whose client fell behind describes the client, so it can never pass), the share of
requests that did not complete is within the error-rate limit, and at most 1 % of its
requests exceed each P99 limit, latency counted from the scheduled send (an exceedance
count with its binomial bound, MLPerf LoadGen's reading; below 100 requests it is "max of
n": no request may exceed). Steps are made while the bench runs: each candidate's
search (``harness.bench.lib.search``) reads the verdicts of its earlier probes to choose
the next rate; the duel runs the two best candidates interleaved at the leader's capacity.

Everything is read back from the arm runs in the History (``notes`` only maps labels to
candidates and rates), so an interrupted bench reads exactly what it measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.bench.benches.bench72.certify import certified
from harness.bench.benches.bench72.slo import SLO, LightLoad, scaled_slo
from harness.bench.benches.bench72.tiers import RELATIVE, TIERS
from harness.bench.lib.capacity_fit import Estimate, ProbeSample, estimate_capacity, probe_schedule
from harness.bench.lib.exceedance import ExceedanceCapacity, queue_verdict
from harness.bench.lib.saturation import FALLS_BEHIND, scheduled_rate
from harness.bench.lib.search import Capacity, Probe, SearchConfig, binding, capacity
from harness.bench.metrics import (
    DEVICE_MEMORY_GIB,
    ENERGY_COLUMNS,
    PEAK_MEMORY_GIB,
    REQUEST_RATE,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
    Metric,
    server_metric,
    throughput_basis,
)
from harness.bench.records import ArmRun
from harness.bench.sendlag import judge_pool, too_small
from harness.bench.spec import Arm, History, Step, WorkloadPlan
from harness.client.records import RequestRecord
from harness.contract.distribution import slo_compliance
from harness.workload import Arrival, Common
from harness.workload.arrival import poisson_scheduled

TTFT, TPOT, ERRORS, CLIENT, QUEUE = "TTFT P99", "TPOT P99", "error rate", "client schedule", "queue grew"
SLO_QUANTILE = 0.99  # the tiers' limits are P99s: at most 1 % of a probe's requests may exceed one
LIGHT = "light load"
MIN_REFERENCE = 100  # unqueued requests a relative SLO's median reference needs (DESIGN.md: no P99 below ~100)
KV_USAGE_PEAK = server_metric("kv_cache_usage_peak")
RUNNING_PEAK = server_metric("running_peak")


def of_run(metric: Metric, run: ArmRun) -> float | None:
    """A per-run metric's figure for one run (REQUEST_RATE, PEAK_MEMORY_GIB are read per run)."""
    read = metric.of_run
    if read is None:
        raise TypeError(f"{metric.name} is not read per run")
    return read(run)


def request_latencies(records: Sequence[RequestRecord]) -> tuple[list[float], list[float]]:
    """Per completed request: TTFT from the scheduled send (else the send) and TPOT (ms), in record order."""
    ttft: list[float] = []
    tpot: list[float] = []
    for r in records:
        first, end = r.first_token_s, r.end_s
        if not r.completed or first is None or end is None:
            continue
        ttft.append(1000 * (first - (r.scheduled_s if r.scheduled_s is not None else r.sent_s or 0.0)))
        if r.completion_tokens and r.completion_tokens > 1:
            tpot.append(1000 * (end - first) / (r.completion_tokens - 1))
    return ttft, tpot


def compliance(values: Sequence[float], limit: float) -> dict[str, Any]:
    """A P99 limit read as an exceedance count (latency from the scheduled send) with its binomial upper bound;
    below 100 requests the verdict is 'max of n': it passes only when no request exceeded."""
    out = slo_compliance([v <= limit for v in values])
    out["limit_ms"], out["max_exceedance"] = limit, 1 - SLO_QUANTILE
    out["reading"] = "exceedance count" if out["verdict_allowed"] else f"max of {len(values)}"
    return out


def verdict(run: ArmRun, slo: SLO, rate: float) -> Probe:
    """Pass or fail of one probe against every limit, with the figures it was judged on: a P99 limit holds when
    at most 1 % of the requests exceed it, latency counted from the scheduled send (LoadGen's definition)."""
    sent = len(run.records) or 1
    errors = (len(run.records) - run.completed) / sent
    ttft, tpot = TTFT_P99.value([run]), TPOT_P99.value([run])
    ttft_all, tpot_all = request_latencies(run.records)
    judged = {TTFT: compliance(ttft_all, slo.ttft_p99_ms), TPOT: compliance(tpot_all, slo.tpot_p99_ms)}
    client_details = run.result.detail("client") or {}
    client = list(client_details.get("client_reasons", client_details.get("schedule_reasons")) or [])
    violated = [CLIENT] if client else []
    if errors > slo.error_rate:
        violated.append(ERRORS)
    if queue_verdict(run.records) == FALLS_BEHIND:  # the arrivals outran the server: no latency here is stationary
        violated.append(QUEUE)
    violated += [name for name, c in judged.items() if c["requests"] and c["exceedance"] > c["max_exceedance"]]
    passed = not violated and bool(ttft_all) and bool(tpot_all)
    detail = {"repeat": run.repeat, "ttft_p99_ms": ttft, "tpot_p99_ms": tpot, "error_rate": round(errors, 4),
              "slo_compliance": judged,
              "achieved_rps": of_run(REQUEST_RATE, run), "throughput_basis": throughput_basis(run, REQUEST_RATE.name),
              "client_reasons": client,
              "peak_memory_gib": of_run(PEAK_MEMORY_GIB, run), "kv_cache_usage_peak": KV_USAGE_PEAK(run),
              "running_peak": RUNNING_PEAK(run), "device_memory_gib": of_run(DEVICE_MEMORY_GIB, run),
              **{m.name: of_run(m, run) for m in ENERGY_COLUMNS}}
    return Probe(rate, passed, tuple(violated), detail)


def lagged(probe: Probe, reason: str | None) -> Probe:
    """``probe`` failed on its client schedule by the pooled send-lag ``reason`` (unchanged without one)."""
    if not reason:
        return probe
    return replace(probe, passed=False, violated=tuple(dict.fromkeys((CLIENT, *probe.violated))),
                   detail={**probe.detail, "client_reasons": [*probe.detail.get("client_reasons", []), reason]})


@dataclass(frozen=True)
class Searched:
    """One candidate's search as read from its probes."""

    name: str
    probes: tuple[Probe, ...]
    capacity: Capacity  # the pass/fail reading of the probes (kept beside the estimate)
    binding: tuple[str, ...]
    binding_rate_rps: float | None
    estimate: Estimate | None = None  # capacity fitted from every probe, with its resampled interval
    certified: ExceedanceCapacity | None = None  # the exceedance lower bound: where it may be deployed
    send_lag: dict[str, Any] | None = None  # its probes' sends pooled (``sendlag.judge_pool``)

    @property
    def lower_rps(self) -> float | None:
        return self.certified.lower_rps if self.certified else None

    def at(self, rate: float | None) -> list[Probe]:
        return [p for p in self.probes if p.rate_rps == rate]

    def peak(self, key: str) -> float | None:
        """The largest ``key`` over the runs at capacity (over every run when nothing held)."""
        runs = self.at(self.capacity.capacity_rps) or list(self.probes)
        values = [v for v in (p.detail.get(key) for p in runs) if v is not None]
        return max(values) if values else None


class Campaign:
    """The steps of bench-72 as functions of the History, for any set of candidate server variants."""

    def __init__(self, cfg: Any, candidates: Sequence[str], light: LightLoad | None, tier: str = RELATIVE,
                 fallback: str = "", qualifies: Callable[[History, str], bool] | None = None):
        self.cfg, self.candidates, self.light, self.tier = cfg, tuple(candidates), light, tier
        self.qualifies = qualifies or (lambda history, name: True)  # the numerics gate, where the plan has one
        self.fallback = fallback  # why a cited bench-66 run was not used ("" when it was, or none was cited)

    def request_list(self, arrival: Arrival, seed: int | None = None) -> Common:
        cfg = self.cfg
        return Common(arrival=arrival, seed=cfg.seed if seed is None else seed, requests=cfg.requests * cfg.scale,
                      input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens, input_range=cfg.length_range,
                      output_range=cfg.length_range)

    def rate_workload(self, rate: float, seconds: float | None = None, name: str = "rate") -> WorkloadPlan:
        """The request list scheduled at ``rate``, lengthened so its arrivals span at least ``seconds``
        (--probe-seconds; the generator is sequential: a longer list starts with the same requests)."""
        plan = self.request_list(Arrival("poisson", rate_rps=rate))
        arrival, requests = poisson_scheduled(rate, seconds or self.cfg.probe_seconds, plan.seed_for("arrival"),
                                              self.cfg.requests * self.cfg.scale)
        return WorkloadPlan(f"{name}-{rate:g}", "random", replace(plan, arrival=arrival, requests=requests))

    def search_config(self, start_rps: float) -> SearchConfig:
        cfg = self.cfg
        # the pass/fail reading of a fixed schedule: one run per rate, the whole schedule as its budget
        return SearchConfig(start_rps=start_rps, growth=cfg.growth, repeats=1,
                            max_probes=cfg.schedule_below + cfg.schedule_extend_below + cfg.schedule_above + 1
                            + (cfg.schedule_extend_above or 0),
                            min_rps=cfg.min_rps,
                            max_rps=cfg.max_rps)

    def slo(self, history: History) -> SLO | None:
        """The named tier's absolute limits (an explicit --slo-* wins); scaled from light load only if asked."""
        if self.tier == RELATIVE:
            return scaled_slo(self.cfg, history.notes.get("light") or self.light)
        tier, cfg = TIERS[self.tier], self.cfg
        ttft, tpot = cfg.slo_ttft_p99_ms or tier.ttft_p99_ms, cfg.slo_tpot_p99_ms or tier.tpot_p99_ms
        changed = [f"{k} {v:g} ms as set" for k, v, given in (("TTFT", ttft, cfg.slo_ttft_p99_ms),
                                                             ("TPOT", tpot, cfg.slo_tpot_p99_ms)) if given]
        basis = f"tier {tier.name}: {tier.source}" + (f"; {', '.join(changed)}" if changed else "")
        return SLO(ttft_p99_ms=ttft, tpot_p99_ms=tpot, error_rate=cfg.slo_error_rate, basis=basis)

    def samples(self, runs: Sequence[ArmRun], probes: Sequence[Probe]) -> list[ProbeSample]:
        """Each probe's per-request TTFT (from the scheduled send) and TPOT, at the rate its arrivals had."""
        out = []
        for run, probe in zip(runs, probes, strict=True):
            ttft, tpot = request_latencies(run.records)
            rate = scheduled_rate([r.scheduled_s for r in run.records if r.scheduled_s is not None])
            out.append(ProbeSample(rate or probe.rate_rps, {TTFT_P99.name: ttft, TPOT_P99.name: tpot},
                                   broken=bool({CLIENT, ERRORS, QUEUE} & set(probe.violated))))
        return out

    def searched(self, history: History, name: str) -> Searched | None:
        """``name``'s search read from its probe runs (None before the SLOs are known); its probes' sends pooled, as
        one client's lateness, where each sent too few to be judged alone."""
        slo, labels = self.slo(history), history.notes.get("probes", {})
        if slo is None:
            return None
        runs = [run for run in history.runs
                if run.label in labels and labels[run.label]["candidate"] == name and not run.failure]
        small = [i for i, run in enumerate(runs) if too_small(run)]
        lag, late = judge_pool([runs[i] for i in small], name, "probes", load_only=True)
        reasons = {small[i]: why for i, why in late.items()}  # by the run's index in ``runs``
        probes = tuple(lagged(verdict(run, slo, labels[run.label]["rate_rps"]), reasons.get(i))
                       for i, run in enumerate(runs))
        names, rate = binding(probes)  # the start rate does not change how probes are read
        estimate = estimate_capacity(self.samples(runs, probes), {TTFT_P99.name: slo.ttft_p99_ms,
                                                                  TPOT_P99.name: slo.tpot_p99_ms},
                                     resamples=min(self.cfg.resamples, 2000), seed=self.cfg.seed)
        broken = [[v for v in p.violated if v in (CLIENT, ERRORS)] for p in probes]
        counted = certified(runs, [p.rate_rps for p in probes], slo, broken) if runs else None
        return Searched(name, probes, capacity(self.search_config(1.0), probes), names, rate, estimate, counted, lag)

    def light_steps(self, history: History, server: str) -> Iterator[Step]:
        """A light-load probe (one request at a time) when no cited run gives the SLOs or a start rate."""
        if self.slo(history) is not None and (self.cfg.start_rps or self.light):
            return
        # relative SLOs need a reference of >= 100 unqueued requests; a start rate alone needs a few
        count = max(MIN_REFERENCE, self.cfg.light_requests) if self.tier == RELATIVE else self.cfg.light_requests
        light = replace(self.request_list(Arrival("closed", concurrency=1)), requests=count)
        arm = Arm(LIGHT, WorkloadPlan("light", "random", light), server)
        yield 1, arm
        run = next((r for r in history.of(LIGHT) if not r.failure), None)
        if run is not None:
            why = ("the cited bench-66 run's light load is of other requests" if self.light else
                   self.fallback or "no bench-66 run was cited")
            caveat = ("" if run.valid else
                      f"; the probe was invalid: {'; '.join(run.result.conclusion.invalid_reasons)}")
            history.notes["light"] = LightLoad(
                TTFT_P50.value([run]),
                TPOT_P50.value([run]),
                of_run(REQUEST_RATE, run),
                f"a light-load probe on {server}: {run.completed} requests one at a time; {why}{caveat}",
            )

    def centre(self, history: History) -> tuple[float | None, str | None]:
        """The schedule's centre and where it came from: --start-rps, else the cited bench-66 saturation point (in
        this bench's requests), else the light probe's rate."""
        if self.cfg.start_rps:
            return self.cfg.start_rps, f"{self.cfg.start_rps:g} req/s, set by --start-rps"
        light = self.light if self.light and self.light.rate_rps else history.notes.get("light")
        if light and light.rate_rps:
            return light.rate_rps, f"{light.rate_rps:g} req/s: {light.source}"
        return None, None

    def schedule(self, history: History) -> tuple[float, ...]:
        """The probe rates every candidate gets (fixed at the first candidate's start; empty without a start)."""
        if "schedule" not in history.notes:
            start = self.centre(history)[0]
            if start is None:
                return ()
            cfg = self.cfg
            history.notes["schedule"] = [
                r
                for r in probe_schedule(start, cfg.growth, cfg.schedule_below, cfg.schedule_above)
                if cfg.min_rps <= r <= cfg.max_rps
            ]
        return tuple(history.notes["schedule"])

    def search(self, history: History, name: str, first: bool) -> Iterator[Step]:
        """One candidate on the shared schedule, low to high; it stops after two probes in a row broke a limit
        (latency does not fall as load grows, so higher rates would break it too). While a candidate's lowest rung
        breaks a limit, a rung below is added (up to --schedule-extend-below for each candidate), which every later
        candidate gets too, so a slow host, or a slow candidate (float32 beside bf16), still gets a capacity
        inside the schedule rather than "below" it; a candidate that reaches the top without breaking twice adds
        rungs above (``extend_above``), so a GPU's capacity is found rather than "above" a CPU-sized schedule."""
        if first:
            yield from self.light_steps(history, name)
        slo, rates = self.slo(history), list(self.schedule(history))
        if slo is None or not rates:
            return
        history.notes.setdefault("start_rps", {})[name] = rates[0]
        extend, passed, i, broke = self.cfg.schedule_extend_below, {}, 0, 0
        while i < len(rates):
            rate = rates[i]
            if rate not in passed:
                arm = Arm(f"{name} rate={rate:g}/s", self.rate_workload(rate), name)
                history.notes.setdefault("probes", {})[arm.label] = {"candidate": name, "rate_rps": rate}
                done = len(history.runs)
                yield len(history.of(arm.label)) + 1, arm
                if len(history.runs) == done:  # the engine refused this variant: nothing to search
                    return
                passed[rate] = verdict(history.runs[-1], slo, rate).passed
                lower = max(self.cfg.min_rps, round(rate / self.cfg.growth, 3))
                if i == 0 and not passed[rate] and extend and lower < rate:
                    extend -= 1
                    rates.insert(0, lower)
                    history.notes["schedule"] = list(rates)
                    history.notes.setdefault("extended_below", []).append(lower)
                    history.notes["start_rps"][name] = lower
                    continue  # the new foot first, then up the schedule
            broke = 0 if passed[rate] else broke + 1
            if broke == 2:
                return
            i += 1
            if i == len(rates):
                self.extend_above(history, rates)

    def extend_above(self, history: History, rates: list[float]) -> None:
        """One rung above the schedule's top (its rate x growth, at most --max-rps) while --schedule-extend-above
        allows: every later candidate gets it too."""
        higher = round(rates[-1] * self.cfg.growth, 3)
        added = history.notes.setdefault("extended_above", [])
        if len(added) >= (self.cfg.schedule_extend_above or 0) or higher > self.cfg.max_rps:
            return
        rates.append(higher)
        added.append(higher)
        history.notes["schedule"] = list(rates)

    def steps(self, history: History) -> Iterator[Step]:
        """Every candidate's search in grid order, then the duel of the top two."""
        for i, name in enumerate(self.candidates):
            yield from self.search(history, name, i == 0)
        yield from self.duel(history)
        yield from self.confirm(history)

    def confirm(self, history: History) -> Iterator[Step]:
        """With --confirm-s, the best qualifying candidate replayed for that long at its certified rate, or at the
        highest rate its probes passed at a share too loose to certify (``supported_rps``), where the replay may."""
        seconds = getattr(self.cfg, "confirm_s", 0.0)
        top = next((s for s in self.ranked(history) if s.certified and s.certified.supported_rps
                    and self.qualifies(history, s.name)), None)
        if not seconds or top is None or top.certified is None:
            return
        rate = top.lower_rps or top.certified.supported_rps or 0.0
        history.notes["confirm"] = {"candidate": top.name, "rate_rps": rate, "seconds": seconds}
        yield 1, Arm(confirm_label(top.name), self.rate_workload(rate, seconds, "confirm"), top.name)

    def keep(self, history: History) -> list[str]:
        """Servers to keep up besides the next step's: the best so far while searching, the pair in the duel."""
        duel = history.notes.get("duel")
        return [duel["leader"], duel["runner_up"]] if duel else [s.name for s in self.ranked(history)[:1]]

    def ranked(self, history: History) -> list[Searched]:
        """Searched candidates, best first: higher certified lower bound, then higher fitted capacity (the secondary
        figure), then lower peak memory, then grid order."""
        found = [s for s in (self.searched(history, n) for n in self.candidates) if s is not None and s.probes]
        return sorted(found, key=lambda s: (-(s.lower_rps or 0.0), -((s.estimate.capacity_rps if s.estimate else None)
                                                                      or 0.0),
                                            s.peak("peak_memory_gib") or 0.0, self.candidates.index(s.name)))

    def duel(self, history: History) -> Iterator[Step]:
        """The top two at the leader's capacity, interleaved A B / B A by round over the repeats."""
        top = self.ranked(history)[:2]
        if len(top) < 2 or not top[0].estimate or top[0].estimate.capacity_rps is None or tied(top[0], top[1]):
            return  # a tie is the decision: no duel can order what the intervals cannot
        # at the leader's certified rate, else just inside its fitted capacity
        rate = top[0].lower_rps or self.cfg.growth**-0.5 * top[0].estimate.capacity_rps
        history.notes["duel"] = {"leader": top[0].name, "runner_up": top[1].name, "rate_rps": rate}
        for r in range(1, self.cfg.repeats + 1):
            for s in top if r % 2 else top[::-1]:
                yield r, Arm(duel_label(s.name), self.rate_workload(rate), s.name)


def tied(a: Searched, b: Searched) -> bool:
    """Neither certifies a higher rate than the other, and their fitted capacity intervals overlap (or either is
    missing)."""
    if (a.lower_rps or 0.0) != (b.lower_rps or 0.0):
        return False  # one is certified to serve more: the duel orders them
    ea, eb = a.estimate, b.estimate
    if not ea or not eb or None in (ea.low_rps, ea.high_rps, eb.low_rps, eb.high_rps):
        return True
    return not (ea.low_rps > eb.high_rps or eb.low_rps > ea.high_rps)  # type: ignore[operator]


def duel_label(name: str) -> str:
    return f"duel {name}"


def confirm_label(name: str) -> str:
    return f"confirm {name}"
