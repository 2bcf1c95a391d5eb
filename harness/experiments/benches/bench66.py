"""bench-66, INF-FLOAT-BASELINE: what does this model on this backend deliver as load grows?

One fixed request list (exact token counts, one seed) is replayed at a sweep of
load levels on one server start: Poisson rates from light load to past saturation
(by default fractions of a capacity probe — the same list in a closed loop at
--probe-concurrency — so the ladder fits the machine; or --rates), plus optional
closed-loop concurrencies. Every level is repeated (rounds low → high, R times).
The model is served in its float dtype (bf16 on the CPU default; recorded).

Read: per level, achieved vs offered throughput and TTFT/TPOT/E2E P50/P99; a level
where the client could not keep its schedule is marked invalid and not read as the
server's. The saturation point is the highest valid rate whose achieved request
rate is within --tolerance of offered and whose P99 TTFT stays under
--ttft-factor × the lightest level's. Later benches cite this run's manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from tabulate import tabulate

from harness.cliconfig import knob
from harness.errors import InvalidInput
from harness.experiments.analysis import Reading, blocked_reading
from harness.experiments.metrics import (
    E2E_P50,
    E2E_P99,
    OUTPUT_TOKENS_PER_S,
    REQUEST_RATE,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
)
from harness.experiments.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    History,
    Phase,
    Plan,
    ServerVariant,
    Step,
    WorkloadPlan,
)
from harness.experiments.sweep import curve_png, load_point, saturation
from harness.workload import Arrival, Common

PROBE = "probe"


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for ≤ 10 minutes on 2 CPU cores once the serving env and model are cached."""

    requests: int = knob(16, "requests in the fixed list (x --scale); every level replays the same list", min=2)
    input_tokens: int = knob(256, "mean prompt length in tokens", min=1)
    output_tokens: int = knob(32, "mean generated tokens per request (ignore_eos: exact)", min=2)
    length_range: float = knob(0.25, "prompt and output lengths uniform in [N(1-r), N(1+r)]", min=0, max=0.9)
    rates: tuple[float, ...] = knob((), "Poisson rates in req/s (empty: --rate-fractions of the probed capacity)")
    rate_fractions: tuple[float, ...] = knob((0.25, 0.5, 0.75, 1.0, 1.25), "load levels as fractions of the "
                                             "probed capacity", min=0.01)
    concurrencies: tuple[int, ...] = knob((), "closed-loop concurrency levels added to the sweep", min=1)
    probe_concurrency: int = knob(16, "closed-loop concurrency of the capacity probe", min=1)
    dtype: str = knob("bfloat16", "served dtype (recorded)", choices=("bfloat16", "float16", "float32", "auto"))
    tolerance: float = knob(0.10, "saturation rule: achieved req/s within this fraction of offered", min=0, max=1)
    ttft_factor: float = knob(3.0, "saturation rule: P99 TTFT at most this multiple of the lightest level's", min=1)

    def check(self) -> None:
        if any(r <= 0 for r in self.rates):
            raise InvalidInput("--rates must all be > 0 requests per second")
        if self.input_tokens * (1 + self.length_range) + self.output_tokens * (1 + self.length_range) > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output exceeds --max-model-len {self.max_model_len}")


def request_list(cfg: Config, arrival: Arrival, seed: int) -> Common:
    """The one request list: same seeds, same lengths and prompts; only the arrival differs per level."""
    return Common(arrival=arrival, seed=seed, requests=cfg.requests * cfg.scale, input_tokens=cfg.input_tokens,
                  output_tokens=cfg.output_tokens, input_range=cfg.length_range, output_range=cfg.length_range)


def rate_label(rate: float) -> str:
    return f"rate={rate:.3g}/s"


def sweep_steps(cfg: Config):
    def level(label: str, arrival: Arrival) -> Arm:
        name = label.replace("/", "").replace("=", "-").replace(" ", "-")
        return Arm(label, WorkloadPlan(name, "random", request_list(cfg, arrival, cfg.seed)), "baseline")

    def steps(history: History) -> Iterator[Step]:
        rates = tuple(cfg.rates)
        if not rates:
            yield 1, level(PROBE, Arrival("closed", concurrency=cfg.probe_concurrency))
            capacity = REQUEST_RATE.value([r for r in history.of(PROBE) if not r.failure])
            if not capacity:
                return
            rates = tuple(round(f * capacity, 3) for f in cfg.rate_fractions)
            history.notes["capacity_probe_rps"] = capacity
        history.notes["offered_rps"] = {rate_label(r): r for r in sorted(rates)}
        history.notes["concurrency"] = {PROBE: cfg.probe_concurrency, **{f"closed c={c}": c for c in cfg.concurrencies}}
        levels = [level(rate_label(r), Arrival("poisson", rate_rps=r)) for r in sorted(rates)]
        levels += [level(f"closed c={c}", Arrival("closed", concurrency=c)) for c in cfg.concurrencies]
        for repeat in range(1, cfg.repeats + 1):
            for arm in levels:
                yield repeat, arm
    return steps


def read(cfg: Config):
    def reading(history: History) -> Reading:
        offered, closed = history.notes.get("offered_rps", {}), history.notes.get("concurrency", {})
        points = [load_point(history.runs, label, offered_rps=offered.get(label), concurrency=closed.get(label))
                  for label in dict.fromkeys(r.label for r in history.runs)]
        sat = saturation(points, tolerance=cfg.tolerance, ttft_factor=cfg.ttft_factor)
        rows = [[p.label, "-" if p.offered_rps is None else f"{p.offered_rps:.2f}",
                 "-" if p.achieved_rps is None else f"{p.achieved_rps:.2f} [{p.achieved_rps_range[0]:.2f}, "
                 f"{p.achieved_rps_range[1]:.2f}]", OUTPUT_TOKENS_PER_S.format(p.output_tokens_per_s),
                 "yes" if p.valid else "no", sat.verdicts.get(p.label, "closed loop")] for p in points]
        table = tabulate(rows, headers=["level", "offered req/s", "achieved req/s [min, max]", "out tok/s",
                                        "valid", "saturation rule"], tablefmt="github")
        best, light = sat.point, sat.light
        lines = ["", table, "", f"saturation rule: {sat.rule}"]
        headline = []
        if best is not None:
            lines.append(f"saturation point: {best.label}: {best.achieved_rps:.2f} req/s achieved, "
                         f"{best.output_tokens_per_s:.1f} output tok/s, P99 TTFT "
                         f"{best.latency_ms[TTFT_P99.name]:.0f} ms, P99 TPOT {best.latency_ms[TPOT_P99.name]:.1f} ms")
            headline += [{"name": "saturation", "metric": "request_rate_rps", "value": best.offered_rps, "unit": "req/s"},
                         {"name": "saturation throughput", "metric": "output_tokens_per_s",
                          "value": best.output_tokens_per_s, "unit": "tok/s"}]
        else:
            lines.append("saturation point: none — no valid level kept up by the rule (lower --rates or "
                         "--rate-fractions)")
        if light is not None:
            headline += [{"name": f"light-load {m.title.split(' ms')[0]}", "metric": m.name,
                          "value": light.latency_ms[m.name], "unit": "ms"} for m in (TTFT_P50, TTFT_P99, TPOT_P50)]
        summary = (f"{cfg.dtype} baseline: saturation at {best.offered_rps:g} req/s offered "
                   f"({best.output_tokens_per_s:.1f} output tok/s)" if best else
                   f"{cfg.dtype} baseline: no level kept up by the saturation rule")
        evidence = "repeated" if cfg.repeats >= 3 and best is not None else "single"
        baseline = {"dtype": cfg.dtype, "capacity_probe_rps": history.notes.get("capacity_probe_rps"),
                    "light_load": light.to_dict() if light else None,
                    "saturation": best.to_dict() if best else None}
        details = {"points": [p.to_dict() for p in points], "saturation": sat.to_dict(), "baseline": baseline}
        figures = {"latency_throughput.png": lambda path: curve_png(
            points, path, title=f"bench-66 INF-FLOAT-BASELINE ({cfg.dtype}): latency vs throughput", saturated=best)}
        blocked = blocked_reading(history, None, cfg.repeats)
        if blocked is not None:
            blocked.details, blocked.lines, blocked.figures, blocked.kind = details, lines, figures, "sweep"
            return blocked
        return Reading(evidence_level=evidence, decision="inconclusive", summary=summary, repeats=cfg.repeats,
                       details=details, lines=lines, figures=figures, headline=headline, kind="sweep")
    return reading


def plan(cfg: Config, model) -> Plan:
    warm = request_list(cfg, Arrival("closed", concurrency=1), cfg.seed + 10_000)
    workloads = (WorkloadPlan("warmup", "random", replace(warm, requests=cfg.warmup_requests), measured=False),) \
        if cfg.warmup_requests else ()
    phase = Phase("sweep", ("baseline",), sweep_steps(cfg),
                  planned_steps=(0 if cfg.rates else 1) + cfg.repeats * (len(cfg.rates or cfg.rate_fractions)
                                                                         + len(cfg.concurrencies)))
    return Plan(workloads=workloads, servers=(ServerVariant("baseline", {"dtype": cfg.dtype}),), arms=(),
                phases=(phase,), read=read(cfg), warmup="warmup" if cfg.warmup_requests else None,
                order="one server start; load levels in rounds low to high, repeated",
                run_label=f"{cfg.dtype} latency-throughput sweep",
                columns=(TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, E2E_P50, E2E_P99, REQUEST_RATE, OUTPUT_TOKENS_PER_S),
                notes=("every level replays the same request list (same seeds); only the arrival process differs",
                       "the capacity probe is the same list in a closed loop; its achieved rate sets the ladder"))


SPEC = BenchSpec(
    name="66", semantic_id="INF-FLOAT-BASELINE", title="bench-66 INF-FLOAT-BASELINE",
    question="what does this model on this backend deliver as load grows?", config=Config, plan=plan,
    doc=__doc__ or "", outputs=("latency_throughput.png",),
    next_steps={
        "inconclusive": "cite this run's manifest as the baseline of later benches; rerun with RATES=... around the "
                        "saturation point for a finer curve",
        "blocked": "read the server log tail in the failed level's result, fix the cause and rerun make bench-66",
        "aborted": "the run was interrupted: rerun make bench-66",
    },
)
