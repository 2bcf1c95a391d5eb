"""Load sweeps: one request list replayed at load levels, each point read from its arm runs.

``LoadSweep`` is the sweep as a bench uses it (its steps for a ``Phase`` and its ``read`` rule);
``load_point``, ``saturation`` and ``curve_png`` are its parts.

A point's figures come from its repeats: latency percentiles pool their completed
requests; achieved throughput is the median of the repeats with their min–max
spread. A point is valid only when every repeat is valid — a point where the
client could not keep its schedule describes the client, so it is marked and
never read as the server's. ``saturation`` states its rule in its result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from harness.bench.analysis import blocked_reading
from harness.bench.metrics import (
    E2E_P50,
    E2E_P99,
    OUTPUT_TOKENS_PER_S,
    REQUEST_RATE,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
)
from harness.bench.records import ArmRun, Reading
from harness.bench.spec import Arm, History, Step, WorkloadPlan
from harness.workload import Arrival, Common

PROBE = "probe"

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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["invalid_reasons"] = list(self.invalid_reasons)
        return out


def _spread(values: Sequence[float]) -> tuple[float | None, tuple[float, float] | None]:
    if not values:
        return None, None
    return float(np.median(values)), (float(min(values)), float(max(values)))


def load_point(runs: Sequence[ArmRun], label: str, *, offered_rps: float | None = None,
               concurrency: int | None = None) -> LoadPoint:
    """Read one point from the arm runs with ``label`` (failed runs are left out and make the point invalid)."""
    mine = [r for r in runs if r.label == label]
    done = [r for r in mine if not r.failure and r.records]
    reasons = [f"repeat {r.repeat}: {reason}" for r in mine for reason in r.result["conclusion"]["invalid_reasons"]]
    rate, rate_range = _spread([v for v in (REQUEST_RATE.of_run(r) for r in done) if v is not None])
    tok, tok_range = _spread([v for v in (OUTPUT_TOKENS_PER_S.of_run(r) for r in done) if v is not None])
    return LoadPoint(label=label, offered_rps=offered_rps, concurrency=concurrency, repeats=len(mine),
                     valid=bool(done) and not reasons and len(done) == len(mine), invalid_reasons=tuple(reasons),
                     achieved_rps=rate, achieved_rps_range=rate_range, output_tokens_per_s=tok,
                     output_tokens_per_s_range=tok_range,
                     latency_ms={m.name: m.value(done) for m in CURVE_METRICS})


@dataclass(frozen=True)
class Saturation:
    """The saturation point by the stated rule, and each timed point's verdict."""

    rule: str
    light: LoadPoint | None
    point: LoadPoint | None
    verdicts: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "light_load": self.light.to_dict() if self.light else None,
                "point": self.point.to_dict() if self.point else None, "verdicts": self.verdicts}


def saturation(points: Sequence[LoadPoint], *, tolerance: float, ttft_factor: float) -> Saturation:
    """The highest offered rate whose achieved rate is within ``tolerance`` of offered and whose P99 TTFT
    stays under ``ttft_factor`` x the lightest valid point's P99 TTFT (timed points only; invalid ones skipped)."""
    rule = (f"highest valid offered rate with achieved req/s >= (1 - {tolerance:g}) x offered and P99 TTFT <= "
            f"{ttft_factor:g} x the P99 TTFT of the lightest valid load")
    timed = sorted((p for p in points if p.offered_rps is not None), key=lambda p: p.offered_rps or 0.0)
    valid = [p for p in timed if p.valid and p.latency_ms.get(TTFT_P99.name) is not None]
    verdicts = {p.label: "invalid: " + "; ".join(p.invalid_reasons) for p in timed if not p.valid}
    if not valid:
        return Saturation(rule, None, None, verdicts)
    light = valid[0]
    limit = ttft_factor * float(light.latency_ms[TTFT_P99.name] or 0.0)
    best = None
    for p in valid:
        kept = p.achieved_rps is not None and p.achieved_rps >= (1 - tolerance) * float(p.offered_rps or 0.0)
        fast = float(p.latency_ms[TTFT_P99.name] or 0.0) <= limit
        verdicts[p.label] = ("keeps up" if kept and fast else
                             ", ".join(filter(None, ["throughput falls behind the offered load" if not kept else "",
                                                     f"P99 TTFT over {limit:.0f} ms" if not fast else ""])))
        if kept and fast:
            best = p
    return Saturation(rule, light, best, verdicts)


def curve_png(points: Sequence[LoadPoint], path: Path, *, title: str, saturated: LoadPoint | None) -> Path:
    """TTFT, TPOT and E2E (P50 and P99) against achieved output tok/s; invalid points hollow and unconnected."""
    from harness.report.plots import log_y_axis, pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13.0, 4.2), dpi=110)
    ordered = sorted((p for p in points if p.output_tokens_per_s is not None), key=lambda p: p.output_tokens_per_s)
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
    """One request list at load levels on one server: a capacity probe (closed loop), then Poisson rates as
    fractions of the probed capacity (or given rates) and closed-loop concurrencies, in rounds low to high,
    ``repeats`` times; read by the saturation rule."""

    requests: Common  # the request list (its arrival is replaced per level)
    server: str
    repeats: int
    rates: tuple[float, ...] = ()
    rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.25)
    concurrencies: tuple[int, ...] = ()
    probe_concurrency: int = 16
    tolerance: float = 0.10
    ttft_factor: float = 3.0
    label: str = "baseline"  # what the summary calls the curve (e.g. "bfloat16 baseline")
    title: str = "latency vs throughput"
    facts: tuple[tuple[str, Any], ...] = ()  # recorded in details.baseline (e.g. the served dtype)

    @property
    def planned_steps(self) -> int:
        return (0 if self.rates else 1) + self.repeats * (len(self.rates or self.rate_fractions)
                                                          + len(self.concurrencies))

    def level(self, label: str, arrival: Arrival) -> Arm:
        name = label.replace("/", "").replace("=", "-").replace(" ", "-")
        return Arm(label, WorkloadPlan(name, "random", replace(self.requests, arrival=arrival)), self.server)

    def steps(self, history: History) -> Iterator[Step]:
        rates = tuple(self.rates)
        if not rates:
            yield 1, self.level(PROBE, Arrival("closed", concurrency=self.probe_concurrency))
            capacity = REQUEST_RATE.value([r for r in history.of(PROBE) if not r.failure])
            if not capacity:
                return
            rates = tuple(round(f * capacity, 3) for f in self.rate_fractions)
            history.notes["capacity_probe_rps"] = capacity
        history.notes["offered_rps"] = {rate_label(r): r for r in sorted(rates)}
        history.notes["concurrency"] = {PROBE: self.probe_concurrency,
                                        **{f"closed c={c}": c for c in self.concurrencies}}
        levels = [self.level(rate_label(r), Arrival("poisson", rate_rps=r)) for r in sorted(rates)]
        levels += [self.level(f"closed c={c}", Arrival("closed", concurrency=c)) for c in self.concurrencies]
        for repeat in range(1, self.repeats + 1):
            for arm in levels:
                yield repeat, arm

    def points(self, history: History) -> list[LoadPoint]:
        offered, closed = history.notes.get("offered_rps", {}), history.notes.get("concurrency", {})
        return [load_point(history.runs, label, offered_rps=offered.get(label), concurrency=closed.get(label))
                for label in dict.fromkeys(r.label for r in history.runs)]

    def read(self, history: History) -> Reading:
        """Per-level table, the saturation point by the rule, the curve, and ``details.baseline`` for citing."""
        points = self.points(history)
        sat = saturation(points, tolerance=self.tolerance, ttft_factor=self.ttft_factor)
        best, light = sat.point, sat.light
        lines = ["", level_table(points, sat), "", f"saturation rule: {sat.rule}"]
        headline: list[dict[str, Any]] = []
        if best is not None:
            lines.append(f"saturation point: {best.label}: {best.achieved_rps:.2f} req/s achieved, "
                         f"{best.output_tokens_per_s:.1f} output tok/s, P99 TTFT "
                         f"{best.latency_ms[TTFT_P99.name]:.0f} ms, P99 TPOT {best.latency_ms[TPOT_P99.name]:.1f} ms")
            headline += [{"name": "saturation", "value": best.offered_rps, "unit": "req/s"},
                         {"name": "saturation throughput", "value": best.output_tokens_per_s, "unit": "tok/s"}]
        else:
            lines.append("saturation point: none — no valid level kept up by the rule (lower --rates or "
                         "--rate-fractions)")
        if light is not None:
            headline += [{"name": f"light-load {m.title.removesuffix(' ms')}", "value": light.latency_ms[m.name],
                          "unit": "ms"} for m in (TTFT_P50, TTFT_P99, TPOT_P50)]
        summary = (f"{self.label}: saturation at {best.offered_rps:g} req/s offered "
                   f"({best.output_tokens_per_s:.1f} output tok/s)" if best else
                   f"{self.label}: no level kept up by the saturation rule")
        details = {"points": [p.to_dict() for p in points], "saturation": sat.to_dict(),
                   "baseline": {"label": self.label, **dict(self.facts), "capacity_probe_rps": history.notes.get("capacity_probe_rps"),
                                "light_load": light.to_dict() if light else None,
                                "saturation": best.to_dict() if best else None}}
        figures = {"latency_throughput.png": lambda path: curve_png(points, path, title=self.title, saturated=best)}
        blocked = blocked_reading(history, None, self.repeats)
        if blocked is not None:
            blocked = replace(blocked, details=details, lines=tuple(lines), figures=figures, kind="sweep")
            return blocked
        return Reading(evidence_level="repeated" if self.repeats >= 3 and best is not None else "single",
                       decision="inconclusive", summary=summary, repeats=self.repeats, details=details, lines=lines,
                       figures=figures, headline=headline, kind="sweep")


def level_table(points: Sequence[LoadPoint], sat: Saturation) -> str:
    rows = [[p.label, "-" if p.offered_rps is None else f"{p.offered_rps:.2f}",
             "-" if p.achieved_rps is None or p.achieved_rps_range is None else
             f"{p.achieved_rps:.2f} [{p.achieved_rps_range[0]:.2f}, {p.achieved_rps_range[1]:.2f}]",
             OUTPUT_TOKENS_PER_S.format(p.output_tokens_per_s), "yes" if p.valid else "no",
             sat.verdicts.get(p.label, "closed loop")] for p in points]
    return tabulate(rows, headers=["level", "offered req/s", "achieved req/s [min, max]", "out tok/s", "valid",
                                   "saturation rule"], tablefmt="github")
