"""Load sweeps: one request list replayed at load levels, each point read from its arm runs.

``LoadSweep`` is the sweep as a bench uses it (its steps for a ``Phase`` and its ``read`` rule);
``load_point``, ``saturation`` and ``curve_png`` are its parts.

A point's figures come from its repeats: latency percentiles pool their completed
requests; achieved throughput is the median of the repeats with their min–max
spread, each repeat's over its steady-state window (else its whole run; the drain
fraction beside it). A point is valid only when every repeat is valid — a point where
the client could not keep its schedule describes the client, so it is marked and
never read as the server's. ``saturation`` states its rule in its result.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from harness.bench.analysis import blocked_reading
from harness.bench.invalid import late_sends_only
from harness.bench.lib.saturation import (
    FALLS_BEHIND,
    INVALID,
    KEEPS_UP,
    LATE_FALLS_BEHIND,
    MIN_VERDICT_REQUESTS,
    UNDETERMINED,
    Bracket,
    Level,
    QueueGrowth,
    Timeline,
    bracket,
    queue_growth,
    steady_throughput,
)
from harness.bench.metrics import (
    E2E_P50,
    E2E_P99,
    OUTPUT_TOKENS_PER_S,
    REQUEST_RATE,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
    basis_summary,
)
from harness.bench.records import ArmRun, Reading
from harness.bench.spec import Arm, History, Step, WorkloadPlan
from harness.client.records import RequestRecord
from harness.workload import Arrival, Common
from harness.workload.arrival import poisson_scheduled

PROBE, PROBE_LONG = "probe", "probe (long)"
# the ladder, as fractions of the probed capacity: one light level, then denser steps around the capacity, where
# the bracket is decided (the levels below 0.5 cost the most time, 100 requests each, and bracket nothing; a 0.9
# rung was undetermined in all four 2-core runs and bought 5 points of bracket width on the simulated engine for
# 60 s a sweep: benchmarks/capacity_coverage.py)
RATE_FRACTIONS = (0.5, 0.75, 1.0, 1.1, 1.25)
# when no level of the ladder falls behind (the closed-loop probe's concurrency held the server below what open
# arrivals drive it to: short requests on a slow host), up to this many rungs more, each this much above the last
EXTRA_RUNGS, EXTRA_STEP = 2, 1.25
PILOT_WAVES = 6  # the first probe's list, in multiples of its concurrency: enough to size the sustained one

CURVE_METRICS = (TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, E2E_P50, E2E_P99)


@dataclass(frozen=True)
class LoadPoint:
    """One load level as measured: offered load, achieved throughput (median, spread) and latencies."""

    label: str
    offered_rps: float | None  # Poisson rate; None for a closed loop
    concurrency: int | None  # closed-loop concurrency; None for a timed schedule
    repeats: int
    valid: bool
    invalid_reasons: tuple[str, ...]
    achieved_rps: float | None
    achieved_rps_range: tuple[float, float] | None
    output_tokens_per_s: float | None
    output_tokens_per_s_range: tuple[float, float] | None
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    scheduled_rps: float | None = None  # the rate the arrivals had (median over repeats); the sweep's x
    growth: tuple[QueueGrowth, ...] = ()  # per repeat: TTFT and backlog slopes, and the verdict
    verdict: str | None = None  # timed levels: keeps up / falls behind / undetermined / invalid
    # which window the throughputs cover (steady state, else whole run) and the repeats' drain fraction
    throughput_basis: dict[str, Any] = field(default_factory=dict)

    @property
    def queue_verdict(self) -> str:
        """What the level's queue did, its validity set aside. It steers the sweep (once a level's queue grew, a
        higher one only queues more, whether the server or a stalled client let it grow), never the bracket."""
        return level_verdict(True, self.growth)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["invalid_reasons"] = list(self.invalid_reasons)
        out["growth"] = [g.to_dict() for g in self.growth]
        return out


def _spread(values: Sequence[float]) -> tuple[float | None, tuple[float, float] | None]:
    if not values:
        return None, None
    return float(np.median(values)), (float(min(values)), float(max(values)))


def load_point(runs: Sequence[ArmRun], label: str, *, offered_rps: float | None = None,
               concurrency: int | None = None, tolerance: float = 0.05) -> LoadPoint:
    """Read one point from the arm runs with ``label`` (failed runs are left out and make the point invalid)."""
    mine = [r for r in runs if r.label == label]
    done = [r for r in mine if not r.failure and r.records]
    reasons = [f"repeat {r.repeat}: {reason}" for r in mine for reason in r.result.conclusion.invalid_reasons]
    rate, rate_range = _spread([v for v in (REQUEST_RATE.run_value(r) for r in done) if v is not None])
    tok, tok_range = _spread([v for v in (OUTPUT_TOKENS_PER_S.run_value(r) for r in done) if v is not None])
    valid = bool(done) and not reasons and len(done) == len(mine)
    late = bool(done) and len(done) == len(mine) and late_sends_only(reasons)
    growth = tuple(queue_growth(timeline(r.records), tolerance) for r in done) if offered_rps is not None else ()
    scheduled, _ = _spread([g.scheduled_rps for g in growth if g.scheduled_rps is not None])
    return LoadPoint(label=label, offered_rps=offered_rps, concurrency=concurrency, repeats=len(mine),
                     valid=valid, invalid_reasons=tuple(reasons),
                     achieved_rps=rate, achieved_rps_range=rate_range, output_tokens_per_s=tok,
                     output_tokens_per_s_range=tok_range,
                     latency_ms={m.name: m.value(done) for m in CURVE_METRICS}, scheduled_rps=scheduled,
                     growth=growth, verdict=None if offered_rps is None else level_verdict(valid, growth, late),
                     throughput_basis=basis_summary(done))


def timeline(records: Sequence[RequestRecord]) -> Timeline:
    """The records' scheduled sends, first tokens and ends (records without a schedule left out)."""
    timed = [r for r in records if r.scheduled_s is not None]
    return Timeline(tuple(float(r.scheduled_s or 0.0) for r in timed), tuple(r.first_token_s for r in timed),
                    tuple(r.end_s for r in timed))


def level_verdict(valid: bool, growth: Sequence[QueueGrowth], late: bool = False) -> str:
    """Falls behind when any repeat did; keeps up when every repeat did; else undetermined. An invalid level is
    unread, unless only late sends made it invalid and its queue still grew (``saturation``: read by direction)."""
    verdicts = {g.verdict for g in growth}
    if late and growth and FALLS_BEHIND in verdicts and not valid:
        return LATE_FALLS_BEHIND
    if not valid or not growth:
        return INVALID
    if FALLS_BEHIND in verdicts:
        return FALLS_BEHIND
    return KEEPS_UP if verdicts == {KEEPS_UP} else UNDETERMINED


def curve_png(points: Sequence[LoadPoint], path: Path, *, title: str, saturated: LoadPoint | None) -> Path:
    """TTFT, TPOT and E2E (P50 and P99) against achieved output tok/s; invalid points hollow and unconnected."""
    from harness.report.plots import log_y_axis, pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13.0, 4.2), dpi=110)
    measured = [p for p in points if p.output_tokens_per_s is not None]
    ordered = sorted(measured, key=lambda p: p.output_tokens_per_s or 0.0)  # (no None: left out above)
    for ax, (name, p50, p99) in zip(axes, (("TTFT", TTFT_P50, TTFT_P99), ("TPOT", TPOT_P50, TPOT_P99),
                                            ("E2E", E2E_P50, E2E_P99)), strict=True):
        for metric, style in ((p50, "o-"), (p99, "s--")):
            good = [(p.output_tokens_per_s, p.latency_ms[metric.name]) for p in ordered
                    if p.valid and p.latency_ms.get(metric.name) is not None]
            bad = [(p.output_tokens_per_s, p.latency_ms[metric.name]) for p in ordered
                   if not p.valid and p.latency_ms.get(metric.name) is not None]
            label = metric.title.split(" ")[1]
            if good:
                ax.plot(*zip(*good, strict=True), style, label=label)
            if bad:
                ax.plot(*zip(*bad, strict=True), style[0], mfc="none", color="grey", label=f"{label} (invalid)")
        if saturated is not None and saturated.output_tokens_per_s is not None:
            ax.axvline(saturated.output_tokens_per_s, color="red", alpha=0.5, lw=1, label="saturation")
        log_y_axis(ax, "achieved output tok/s", f"{name} (ms, log scale)")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def rate_label(rate: float) -> str:
    return f"rate={rate:.3g}/s"


@dataclass(frozen=True)
class LoadSweep:
    """One request list at load levels on one server: a sustained closed-loop capacity probe, then Poisson rates
    as fractions of the probed capacity (or given rates) and closed-loop concurrencies, low to high, ``repeats``
    times. Every timed level's list is scheduled at its rate and sized by duration (``poisson_scheduled``); read by
    queue growth (``harness.bench.lib.saturation``)."""

    requests: Common  # the request list (its arrival is replaced, and its length sized, per level)
    server: str
    repeats: int
    rates: tuple[float, ...] = ()
    rate_fractions: tuple[float, ...] = RATE_FRACTIONS
    concurrencies: tuple[int, ...] = ()
    probe_concurrency: int = 16
    tolerance: float = 0.05  # largest share of the offered load that may queue up at a level that keeps up
    min_level_s: float = 60.0  # a timed level's arrivals span at least this long ...
    min_level_requests: int = 100  # ... with at least this many requests
    probe_s: float = 60.0  # the closed-loop probe's steady-state window lasts at least this long
    label: str = "baseline"  # what the summary calls the curve (e.g. "bfloat16 baseline")
    title: str = "latency vs throughput"
    facts: tuple[tuple[str, Any], ...] = ()  # recorded in details.baseline (e.g. the served dtype)

    @property
    def planned_steps(self) -> int:
        """The bound progress shows: two probes at most (the second lengthened to last ``probe_s``), then levels."""
        return (0 if self.rates else 2) + self.repeats * (len(self.rates) or len(self.rate_fractions) + EXTRA_RUNGS
                                                          + len(self.concurrencies))

    def level(self, label: str, arrival: Arrival, requests: int | None = None) -> Arm:
        name = label.replace("/", "").replace("=", "-").replace(" ", "-").replace("(", "").replace(")", "")
        common = replace(self.requests, arrival=arrival, requests=requests or self.requests.requests)
        return Arm(label, WorkloadPlan(name, "random", common), self.server)

    def probe(self, history: History) -> Iterator[Step]:
        """Closed loop at ``probe_concurrency`` over a list long enough that it refills for ``probe_s`` seconds."""
        size = PILOT_WAVES * self.probe_concurrency  # a pilot: its rate sizes the sustained probe
        for label in (PROBE, PROBE_LONG):
            yield 1, self.level(label, Arrival("closed", concurrency=self.probe_concurrency), size)
            runs = [r for r in history.of(label) if not r.failure and r.records]
            capacity, window_s = (steady_throughput([r.sent_s for r in runs[-1].records if r.sent_s is not None],
                                                    [r.end_s for r in runs[-1].records], self.probe_concurrency)
                                  if runs else (None, 0.0))
            history.notes["capacity_probe"] = {"label": label, "requests": size, "rps": capacity,
                                               "window_s": round(window_s, 1), "concurrency": self.probe_concurrency}
            if window_s >= self.probe_s or not runs:
                return
            # too short for a steady window (a fast host): its whole-run rate still sizes the sustained probe
            pilot = capacity or REQUEST_RATE.run_value(runs[-1])
            if not pilot:
                return
            size = math.ceil(1.2 * pilot * self.probe_s) + 2 * self.probe_concurrency

    def steps(self, history: History) -> Iterator[Step]:
        rates = tuple(self.rates)
        if not rates:
            yield from self.probe(history)
            capacity = (history.notes.get("capacity_probe") or {}).get("rps")
            if not capacity:
                return
            rates = tuple(round(f * capacity, 3) for f in self.rate_fractions)
            history.notes["capacity_probe_rps"] = capacity
        history.notes["offered_rps"] = {rate_label(r): r for r in sorted(rates)}
        history.notes["concurrency"] = {PROBE: self.probe_concurrency, PROBE_LONG: self.probe_concurrency,
                                        **{f"closed c={c}": c for c in self.concurrencies}}
        seed = self.requests.seed_for("arrival")  # every level draws the same unit gaps, scaled to its rate

        def timed(rate: float) -> tuple[float, Arm]:
            return rate, self.level(rate_label(rate), *poisson_scheduled(rate, self.min_level_s, seed,
                                                                         self.min_level_requests))

        levels = [timed(r) for r in sorted(rates)]
        closed = [self.level(f"closed c={c}", Arrival("closed", concurrency=c)) for c in self.concurrencies]
        extra = 0 if self.rates else EXTRA_RUNGS  # given rates are run as given
        cutoff = math.inf  # the scheduled rate of the lowest level seen to fall behind
        for repeat in range(1, self.repeats + 1):
            for rate, arm in levels:  # a list iterator also yields what is appended below
                if rate > cutoff:  # the bracket is closed below it: more load only queues
                    history.notes.setdefault("skipped_levels", []).append(f"{arm.label} repeat {repeat}")
                    continue
                yield repeat, arm
                if load_point(history.runs, arm.label, offered_rps=rate,
                              tolerance=self.tolerance).queue_verdict == FALLS_BEHIND:
                    cutoff = min(cutoff, rate)
                elif repeat == 1 and extra and cutoff == math.inf and arm is levels[-1][1]:
                    extra -= 1  # nothing fell behind yet: one rung higher
                    levels.append(timed(round(rate * EXTRA_STEP, 3)))
                    history.notes["offered_rps"][levels[-1][1].label] = levels[-1][0]
                    history.notes.setdefault("extra_levels", []).append(levels[-1][1].label)
            for arm in closed:
                yield repeat, arm

    def points(self, history: History) -> list[LoadPoint]:
        offered, closed = history.notes.get("offered_rps", {}), history.notes.get("concurrency", {})
        return [load_point(history.runs, label, offered_rps=offered.get(label), concurrency=closed.get(label),
                           tolerance=self.tolerance) for label in dict.fromkeys(r.label for r in history.runs)]

    def rule(self) -> str:
        return (f"a level keeps up when the 95 % intervals of its TTFT slope (s/s) and backlog slope (share of the "
                f"scheduled rate) both lie <= {self.tolerance:g}, falls behind when either or its E2E slope (s/s) "
                "lies wholly above; "
                f"bracket [last level that kept up, first that fell behind] by scheduled rate; an invalid level is "
                f"unread, except one only sent late whose queue still grew, which closes the bracket from above; "
                f"levels >= {self.min_level_s:g} s and >= {self.min_level_requests} requests "
                f"(a level of fewer than {MIN_VERDICT_REQUESTS} is undetermined); levels above the first whose queue "
                "fell behind (an invalid one's too) are not run"
                + ("" if self.rates else f"; when none of the ladder's does, up to {EXTRA_RUNGS} more, each "
                                         f"{EXTRA_STEP:g} x the last"))

    def read(self, history: History) -> Reading:
        """Per-level table, the saturation bracket, the curve, and ``details.baseline`` for citing benches."""
        points = self.points(history)
        timed = [p for p in points if p.offered_rps is not None]
        sat = bracket([Level(p.label, p.scheduled_rps or float(p.offered_rps or 0.0), p.verdict or INVALID)
                       for p in timed])
        light = next((p for p in sorted(timed, key=lambda p: p.scheduled_rps or 0.0) if p.verdict == KEEPS_UP), None)
        low = next((p for p in timed if sat.low and p.label == sat.low.label), None)
        probe = history.notes.get("capacity_probe") or {}
        lines = ["", level_table(points), "", f"saturation rule: {self.rule()}",
                 f"saturation bracket: {sat.text}",
                 f"closed-loop capacity (c={probe.get('concurrency')}, steady window {probe.get('window_s')} s): "
                 f"{probe['rps']:.3g} req/s" if probe.get("rps") else "closed-loop capacity: not probed"]
        skipped = history.notes.get("skipped_levels", [])
        if skipped:
            lines.append("not run, above a level that fell behind (the bracket was closed): " + ", ".join(skipped))
        extra = history.notes.get("extra_levels", [])
        if extra:
            lines.append("run above the ladder, none of whose levels fell behind: " + ", ".join(extra))
        lines += [f"invalid, {p.label}: {p.invalid_reasons[0]}" + (f" (+{len(p.invalid_reasons) - 1} more)"
                                                                   if len(p.invalid_reasons) > 1 else "")
                  + ("; read anyway: only its sends ran late (a lower load than scheduled) and its queue still grew"
                     if p.verdict == LATE_FALLS_BEHIND else "")
                  for p in timed if p.verdict in (INVALID, LATE_FALLS_BEHIND) and p.invalid_reasons]
        headline: list[dict[str, Any]] = [
            {"name": "saturation bracket low", "value": sat.low.scheduled_rps if sat.low else None, "unit": "req/s"},
            {"name": "saturation bracket high", "value": sat.high.scheduled_rps if sat.high else None,
             "unit": "req/s"}]
        if light is not None:
            headline += [{"name": f"light-load {m.title.removesuffix(' ms')}", "value": light.latency_ms[m.name],
                          "unit": "ms"} for m in (TTFT_P50, TTFT_P99, TPOT_P50)]
        summary = f"{self.label}: saturation between {sat.text}"
        details = {"points": [p.to_dict() for p in points], "saturation": {"rule": self.rule(), **sat.to_dict()},
                   "skipped_levels": skipped, "extra_levels": extra,
                   "baseline": {"label": self.label, **dict(self.facts), "capacity_probe": probe,
                                "capacity_probe_rps": history.notes.get("capacity_probe_rps"),
                                "light_load": light.to_dict() if light else None, "bracket": sat.to_dict(),
                                "saturation": saturation_record(low, sat)}}
        figures = {"latency_throughput.png": lambda path: curve_png(points, path, title=self.title, saturated=low)}
        blocked = blocked_reading(history, None, self.repeats)
        if blocked is not None:
            blocked = replace(blocked, details=details, lines=tuple(lines), figures=figures, kind="sweep")
            return blocked
        return Reading(evidence_level="repeated" if self.repeats >= 3 and sat.determined else "single",
                       decision="inconclusive", summary=summary, repeats=self.repeats, details=details, lines=lines,
                       figures=figures, headline=headline, kind="sweep")


def saturation_record(low: LoadPoint | None, sat: Bracket) -> dict[str, Any] | None:
    """What citing benches read: the last level that kept up, at its scheduled rate, with the bracket; None when
    the bracket is undetermined (a citing bench then probes for itself)."""
    if low is None or not sat.determined:
        return None
    return {**low.to_dict(), "offered_rps": low.scheduled_rps, "bracket": sat.to_dict()}


def level_table(points: Sequence[LoadPoint]) -> str:
    rows = [[p.label, "-" if p.scheduled_rps is None else f"{p.scheduled_rps:.3g}",
             "-" if p.achieved_rps is None or p.achieved_rps_range is None else
             f"{p.achieved_rps:.3g} [{p.achieved_rps_range[0]:.3g}, {p.achieved_rps_range[1]:.3g}]",
             OUTPUT_TOKENS_PER_S.format(p.output_tokens_per_s), _drain_text(p), _slope_text(p, "ttft_slope"),
             _slope_text(p, "backlog_slope"), _slope_text(p, "e2e_slope"), "yes" if p.valid else "no",
             p.verdict or "closed loop"] for p in points]
    return tabulate(rows, headers=["level", "scheduled req/s", "achieved req/s [min, max]", "out tok/s", "drain",
                                   "TTFT slope [95 %]", "backlog slope [95 %]", "E2E slope [95 %]", "valid", "verdict"],
                    tablefmt="github")


def _slope_text(point: LoadPoint, name: str) -> str:
    slopes = [getattr(g, name) for g in point.growth if getattr(g, name) is not None]
    return "; ".join(f"{s.value:+.3f} [{s.low:+.3f}, {s.high:+.3f}]" for s in slopes) or "-"


def _drain_text(point: LoadPoint) -> str:
    """The level's drain fraction, marked when its throughput is over the whole run (no steady-state window)."""
    drain = point.throughput_basis.get("drain_fraction")
    whole = "whole_run" in point.throughput_basis.get("throughput_window", {})
    return ("-" if drain is None else f"{drain:.0%}") + (" (whole run)" if whole else "")
