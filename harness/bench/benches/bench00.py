"""bench-00, INF-AA-START: how far apart are two starts of one server configuration on this host?

The A/A start control. Two server variants with identical settings (the bench's base configuration) are
started one after the other; each serves the same short closed-loop request list ``--repeats`` times
(the prefix cache reset before each), and repeat r of start 2 is compared with repeat r of start 1 on
the metrics other benches decide on: TTFT P50, TPOT P50, E2E P50 and output tokens/s. Per metric the
result gives the ratio start 2 / start 1 with its 95 % Student t interval over the repeats and the bound
b = max(|log ci_low|, |log ci_high|): the start-to-start shift the interval cannot rule out. A metric is
bounded when its bound is at most ``--bound-limit`` from at least 5 repeats. Benches whose claims cross
server starts cite the newest run of this bench made on the same host (``--aa-control``): their interval
is widened by the bound of its metric and their evidence stays repeated: one A/A pair is one draw of the start
effect, so only alternating restarts make a cross-start contrast paired (docs/measurement.md).
"""

from __future__ import annotations

import math
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
from harness.bench.startcontrol import DETAILS_KEY, SEMANTIC_ID, start_rows
from harness.bench.stats import MIN_PAIRED_REPEATS
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common

FIRST, SECOND = "start-1", "start-2"
METRICS = (TTFT_P50, TPOT_P50, E2E_P50, OUTPUT_TOKENS_PER_S)


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for about 2 minutes on 2 idle CPU cores with a warm compile cache (two server starts of about
    40 s, then 2 x 8 runs of 4 short requests, about 2 s each): 8 repeats, so that 5 pairs (Student t with 4
    degrees of freedom) survive when a loaded host makes a few runs invalid."""

    repeats: int = knob(8, "repeats per start (>= 5 valid pairs are needed to bound; 8 leave room for invalid runs)",
                        min=2)
    requests: int = knob(4, "requests per repeat (multiplied by --scale)", min=1)
    input_tokens: int = knob(32, "prompt tokens per request", min=1)
    output_tokens: int = knob(8, "generated tokens per request (ignore_eos)", min=2)
    concurrency: int = knob(1, "closed-loop concurrency", min=1)
    bound_limit: float = knob(0.10, "largest start-to-start bound (relative) the control certifies for a metric",
                              min=0.001, max=1, group="protocol")


def reader(cfg: Config, plan: Plan) -> Callable[[History], Reading]:
    """Per metric the start-2 / start-1 ratio, interval and bound; bounded when every bound is within the limit."""
    def read(history: History) -> Reading:
        results = [claim_effect(history.runs, c, seed=cfg.seed + i, resamples=cfg.resamples, design="cross-start")
                   for i, c in enumerate(plan.claims)]
        rows = start_rows(results, cfg.bound_limit, MIN_PAIRED_REPEATS)
        blocked = blocked_reading(history, None, cfg.repeats)
        if blocked is not None or not rows:
            return blocked or Reading(evidence_level="precheck", decision="blocked", invalid_reasons=["no valid pair"],
                                      summary="no completed valid pair of starts: nothing bounded")
        lines = [f"{r['title']}: start-2/start-1 = {r['ratio']:.3f} ({r['confidence']:.0%} CI [{r['ci_low']:.3f}, "
                 f"{r['ci_high']:.3f}], {r['n_repeats']} repeats) -> bound ±{r['bound_pct']:.1f} %"
                 + ("" if r["bounded"] else f" (not bounded: {r['why_not']})") for r in rows]
        widest = max(rows, key=lambda r: r["bound_log"])
        bounded = all(r["bounded"] for r in rows)
        shown = ", ".join(f"{r['title']} ±{r['bound_pct']:.1f} %" for r in rows)
        summary = (f"start-to-start shift bounded within ±{widest['bound_pct']:.1f} % ({shown})" if bounded else
                   f"start-to-start shift not bounded: {widest['title']} ±{widest['bound_pct']:.1f} % "
                   f"({widest['why_not'] or 'another metric fails'}); {shown}")
        step = ("benches with cross-start claims on this host cite this run (AA_CONTROL=latest, the default)"
                if bounded else "rerun with more REPEATS or SCALE, on a quieter host; bounded metrics are still cited")
        headline = [{"name": f"start-to-start {r['title']}", "value": r["ratio"], "unit": "ratio",
                     "ci_low": r["ci_low"], "ci_high": r["ci_high"], "arm": f"{SECOND} vs {FIRST}",
                     "bound_pct": r["bound_pct"], "interval_unit": "repeat", "n_repeats": r["n_repeats"],
                     "n_requests": r["n_requests"], "method": r["method"], "validity": VALIDITY_CONSEQUENCE}
                    for r in rows]
        primary = results[0] or next(r for r in results if r)
        return Reading(evidence_level=primary.evidence_level, decision="inconclusive", summary=summary,
                       effect=primary.effect, repeats=cfg.repeats, lines=lines, headline=headline, next_step=step,
                       details={DETAILS_KEY: {"rows": rows, "bounded": bounded, "limit": cfg.bound_limit,
                                              "limit_log": math.log1p(cfg.bound_limit),
                                              "rule": "bound = max(|log ci_low|, |log ci_high|) of start-2/start-1; "
                                                      f"bounded when <= log(1 + limit) from >= {MIN_PAIRED_REPEATS} "
                                                      "repeats"}})
    return read


def plan(cfg: Config, model: PreparedModel) -> Plan:
    common = Common(Arrival("closed", concurrency=cfg.concurrency), seed=cfg.seed, requests=cfg.requests * cfg.scale,
                    input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens)
    servers = (ServerVariant(FIRST, {}, note="the base configuration"),
               ServerVariant(SECOND, {}, note="the same configuration, started again"))
    arms = (Arm(FIRST, "main", FIRST), Arm(SECOND, "main", SECOND))
    made = Plan(workloads=(WorkloadPlan("main", "random", common),), servers=servers, arms=arms,
                schedule=phases_for(arms, cfg.repeats, "sequential"),
                claims=tuple(Claim(m, FIRST, SECOND, name=m.title) for m in METRICS),
                run_label="A/A: start-2 vs start-1 of one configuration",
                notes=("both variants have identical settings: any difference is the start-to-start shift",))
    return replace(made, read=reader(cfg, made))


SPEC = BenchSpec(
    name="00", semantic_id=SEMANTIC_ID, question="how far apart are two starts of one configuration on this host?",
    config=Config, plan=plan, next_steps={},  # the reading names its own next step; the common ones fill the rest
)
