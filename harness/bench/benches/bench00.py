"""bench-00, INF-AA-START: how far apart do starts of one server configuration land on this host?

The start-to-start variance. ``--starts`` server variants with identical settings (the bench's base configuration)
are started one after the other; each serves the same short closed-loop request list ``--repeats`` times (the
prefix cache reset before each). Per metric other benches decide on (TTFT P50, TPOT P50, E2E P50, output tokens/s)
the result gives the between-start variance of the log figure by one-way random effects over every start's valid
repeats, with ``starts - 1`` df (``startcontrol.start_variance``), and, as before, start 2 / start 1 with its 95 %
Student t interval over the first pair's repeats. Benches whose claims cross server starts pool every run of this
bench made on the same host key within 14 days (``--aa-control``): their interval carries ``2·σ²_start`` beside
its own variance, with Welch–Satterthwaite df, and may decide (evidence ``start-pooled``; docs/measurement.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.bench.analysis import blocked_reading
from harness.bench.claims import VALIDITY_CONSEQUENCE, claim_effect
from harness.bench.metrics import E2E_P50, OUTPUT_TOKENS_PER_S, TPOT_P50, TTFT_P50
from harness.bench.records import Reading
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    History,
    Plan,
    ServerVariant,
    WorkloadPlan,
    phases_for,
)
from harness.bench.startcontrol import DETAILS_KEY, EXPIRY_DAYS, SEMANTIC_ID, start_rows
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common

FIRST, SECOND = "start-1", "start-2"
MIN_DF = 4  # fewer starts leave the start variance too loose to widen another bench's interval usefully
METRICS = (TTFT_P50, TPOT_P50, E2E_P50, OUTPUT_TOKENS_PER_S)


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for about 4 minutes on 2 idle CPU cores with a warm compile cache (six server starts of about
    35 s, then 5 runs of 4 short requests each, under a second a run; 9 minutes where starts take 70 s): six starts
    give the start variance 5 degrees of freedom; the repeats give each start's mean and the within-start variance."""

    starts: int = knob(6, "server starts of the one configuration (starts - 1 is the start variance's df)", min=2,
                       max=50)
    repeats: int = knob(5, "repeats per start", min=2)
    requests: int = knob(4, "requests per repeat (multiplied by --scale)", min=1)
    input_tokens: int = knob(32, "prompt tokens per request", min=1)
    output_tokens: int = knob(8, "generated tokens per request (ignore_eos)", min=2)
    concurrency: int = knob(1, "closed-loop concurrency", min=1)


def labels(cfg: Config) -> tuple[str, ...]:
    return tuple(f"start-{i}" for i in range(1, cfg.starts + 1))


def _lines(rows: list[dict]) -> list[str]:
    return [f"{r['title']}: between-start sd {r['start_sd_pct']:.1f} % ({r['starts']} starts, {r['start_df']} df; "
            f"MS between {r['ms_between']:.3g}, within {r['ms_within']:.3g} on the log scale); start-2/start-1 = "
            f"{r['ratio']:.3f} ({r['confidence']:.0%} CI [{r['ci_low']:.3f}, {r['ci_high']:.3f}], "
            f"{r['n_repeats']} repeats)" if r["start_df"] else f"{r['title']}: fewer than two starts measured"
            for r in rows]


def reader(cfg: Config, plan: Plan) -> Callable[[History], Reading]:
    """Per metric the between-start variance of the log figure, and the first pair's start-2 / start-1 ratio."""
    def read(history: History) -> Reading:
        results = [claim_effect(history.runs, c, seed=cfg.seed + i, resamples=cfg.resamples, design="cross-start")
                   for i, c in enumerate(plan.claims)]
        rows = start_rows(results, history.runs, labels(cfg))
        blocked = blocked_reading(history, None, cfg.repeats)
        if blocked is not None or not rows:
            return blocked or Reading(evidence_level="precheck", decision="blocked", invalid_reasons=["no valid pair"],
                                      summary="no completed valid pair of starts: no start variance")
        df = min(r["start_df"] for r in rows)
        shown = ", ".join(f"{r['title']} {r['start_sd_pct']:.1f} %" for r in rows if r["start_df"])
        summary = f"start-to-start sd {shown} ({df} df)" if df else "fewer than two starts measured: no start variance"
        step = (f"benches with cross-start claims on this host key pool this run for {EXPIRY_DAYS} days "
                "(AA_CONTROL=latest, the default)" if df >= MIN_DF else
                f"only {df} df of start variance (< {MIN_DF}): it is pooled, but rerun with more STARTS (or on a "
                "quieter host) to tighten it")
        headline = [{"name": f"start-to-start {r['title']}", "value": r["ratio"], "unit": "ratio",
                     "ci_low": r["ci_low"], "ci_high": r["ci_high"], "arm": f"{SECOND} vs {FIRST}",
                     "interval_unit": "repeat", "n_repeats": r["n_repeats"], "n_requests": r["n_requests"],
                     "method": r["method"], "validity": VALIDITY_CONSEQUENCE} for r in rows]
        headline += [{"name": f"between-start sd {r['title']}", "value": r["start_sd_pct"] / 100, "unit": "relative sd",
                      "arm": f"{r['starts']} starts", "df": r["start_df"], "method": "one-way random effects on the "
                      "log figure over every start's valid repeats", "validity": VALIDITY_CONSEQUENCE}
                     for r in rows if r["start_df"]]
        primary = results[0] or next(r for r in results if r)
        return Reading(evidence_level=primary.evidence_level, decision="inconclusive", summary=summary,
                       effect=primary.effect, repeats=cfg.repeats, lines=_lines(rows), headline=headline,
                       next_step=step, measures=True,
                       details={DETAILS_KEY: {"rows": rows, "starts": cfg.starts, "expiry_days": EXPIRY_DAYS,
                                              "rule": "σ²_start = (MS_between − MS_within) / n0 of the log figure, "
                                                      "starts as groups, starts − 1 df; pooled by citing benches "
                                                      "(df-weighted, summed df, clipped at 0)"}})
    return read


def plan(cfg: Config, model: PreparedModel) -> Plan:
    common = Common(Arrival("closed", concurrency=cfg.concurrency), seed=cfg.seed, requests=cfg.requests * cfg.scale,
                    input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens)
    names = labels(cfg)
    servers = tuple(ServerVariant(n, {}, note="the base configuration" if i == 0 else
                                  "the same configuration, started again") for i, n in enumerate(names))
    arms = tuple(Arm(n, "main", n) for n in names)
    made = Plan(workloads=(WorkloadPlan("main", "random", common),), servers=servers, arms=arms,
                schedule=phases_for(arms, cfg.repeats, "sequential"),
                claims=tuple(Claim(m, FIRST, SECOND, name=m.title) for m in METRICS),
                run_label=f"A/A: {cfg.starts} starts of one configuration",
                notes=("every variant has identical settings: any difference is the start-to-start shift",))
    return replace(made, read=reader(cfg, made))


SPEC = BenchSpec(
    name="00", semantic_id=SEMANTIC_ID, question="how far apart do starts of one configuration land on this host?",
    config=Config, plan=plan, next_steps={},  # the reading names its own next step; the common ones fill the rest
)
