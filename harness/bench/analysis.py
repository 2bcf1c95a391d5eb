"""From arm runs to what a bench concludes: paired effects of claims, controls, and the one top-level result.

A claim's effect is the ratio treatment/baseline of its metric per repeat, over the
repeats where both arms completed and were valid (``stats``: Student t on the per-repeat
log ratios; a request-level joint bootstrap beside it), read by ``stats.decide`` against
the claim's margin. A bench has one primary claim (the first, unless one says
``primary``); the others are secondary, Holm-corrected, and never the headline. A control
is an equivalence test (TOST): it lets a decision stand only when its interval lies
inside its margin — the stated one, or ``CONTROL_SHARE`` of the primary effect when that
is larger, so a shift that cannot explain a material share of the effect does not veto
it. An invalid arm run is left out of every effect it would distort (and listed); a
failed one blocks the decision, completed pairs are still reported.

The top-level result is built once, complete, and validated once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.bench.claims import (
    VALIDITY_CONSEQUENCE,
    ClaimResult,
    claim_effect,
    control_entry,
    design_of,
    dropped_pairs,
    excluded_runs,
    primary_index,
    secondary_entries,
)
from harness.bench.exclusion import kept, usable
from harness.bench.metrics import Metric, basis_summary
from harness.bench.records import ArmRun, Reading, completed_runs
from harness.bench.spec import History, Plan
from harness.contract import (
    Conclusion,
    Correctness,
    Effect,
    Failure,
    Performance,
    build_result,
)
from harness.contract.result import utc_now

__all__ = ["ClaimResult", "Reading", "claim_effect", "read_claims", "top_result"]


def on_better_side(effect: Effect) -> bool:
    return effect.ci_high < effect.no_effect if effect.better == "lower" else effect.ci_low > effect.no_effect


def effect_text(effect: Effect, metric_title: str = "") -> str:
    n = f"{effect.n_pairs} repeats" + (f" x >= {effect.n_requests} requests" if effect.n_requests else "")
    margin = f", margin {effect.margin:.1%}" if effect.margin is not None else ""
    return (f"{effect.arm_b} / {effect.arm_a} {metric_title or effect.metric} = {effect.value:.3f} "
            f"({effect.confidence:.0%} CI [{effect.ci_low:.3f}, {effect.ci_high:.3f}], {n}, unit "
            f"{effect.unit or 'repeat'}{margin})")


def first_failure(runs: Sequence[ArmRun]) -> ArmRun | None:
    return next((r for r in runs if r.failure), None)


def blocked_reading(history: History, failure: Failure | None, repeats: int) -> Reading | None:
    """Blocked when an arm run failed or a server did not start: completed pairs are kept, no claim is made."""
    failed = first_failure(history.runs)
    if failed is not None and failed.failure is not None:
        reason = f"{failed.label} repeat {failed.repeat}: {failed.failure.kind}"
        cause = replace(failed.failure)
    elif failure is not None:
        reason, cause = f"{failure.stage}: {failure.kind}", failure
    else:
        return None
    return Reading(evidence_level="single", decision="blocked", failure=cause, invalid_reasons=[reason],
                   repeats=repeats, summary=f"blocked: {reason}; completed pairs are kept but no claim is made")


def headline_entries(history: History, plan: Plan, results: Sequence[ClaimResult | None],
                     primary: int) -> list[dict[str, Any]]:
    """The primary effect first, then the secondaries, then each compared arm's figure, with n and duration."""
    order = [primary, *(i for i in range(len(results)) if i != primary)]
    out = [{"name": f"effect on {r.effect.metric}", "value": r.effect.value, "unit": "ratio",
            "ci_low": r.effect.ci_low, "ci_high": r.effect.ci_high, "arm": f"{r.effect.arm_b} vs {r.effect.arm_a}",
            "role": "primary" if i == primary else "secondary", "interval_unit": r.effect.unit,
            "n_repeats": r.effect.n_pairs, "n_requests": r.effect.n_requests, "method": r.effect.method,
            "margin": r.margin, "validity": VALIDITY_CONSEQUENCE, "excluded": list(r.excluded),
            **(basis_summary([x for x in history.runs if x.label in (r.claim.baseline, r.claim.treatment)
                              and not x.failure and x.valid], r.claim.metric.throughput_key)
               if r.claim.metric.throughput_key else {})}
           for i in order if (r := results[i]) is not None]
    if plan.claims:
        metric = plan.claims[primary].metric
        for label in dict.fromkeys(x for c in plan.claims for x in (c.baseline, c.treatment)):
            done = [kept(r, metric) for r in completed_runs(history.runs, label) if usable(r, metric)]
            if done:
                n = sum(len(metric.samples(r.records)) for r in done) if metric.samples else None
                duration = sum((r.result.performance.throughput or {}).get("duration_s") or 0.0
                               for r in done)
                out.append({"name": metric.title, "value": metric.value(done), "unit": metric.unit, "arm": label,
                            "n_repeats": len(done), "n_requests": n, "duration_s": round(duration, 3),
                            "validity": VALIDITY_CONSEQUENCE,
                            **(basis_summary(done, metric.throughput_key) if metric.throughput_key else {})})
    return out


def read_claims(history: History, plan: Plan, *, seed: int, resamples: int, repeats: int,
                failure: Failure | None = None, margin: float | None = None) -> Reading:
    """The primary claim is the headline; secondaries (Holm-corrected) and every control go into ``details``."""
    if margin is None:
        margin = getattr(history.cfg, "margin", None)
    start = history.start_control  # a pooled start variance joins the cross-start claims' and controls' intervals
    results = [claim_effect(history.runs, c, seed=seed + i, resamples=resamples, design=design_of(plan, c),
                            margin=margin, start=start) for i, c in enumerate(plan.claims)]
    p_i = primary_index(plan)
    primary = results[p_i] if results else None
    controls = [claim_effect(history.runs, c, seed=seed + 100 + i, resamples=resamples, design=design_of(plan, c),
                             margin=margin, start=start) for i, c in enumerate(plan.controls)]
    control_rows = {id(r): control_entry(r, primary) for r in controls if r}
    details: dict[str, Any] = {"claims": secondary_entries(results, p_i), "controls": list(control_rows.values())}
    entries = iter(details["claims"])
    # a valid pair with no figure (an arm without a sample, a None or 0 per-run figure) is named, never dropped silently
    lines = [f"dropped from {c.name}: {why}" for c in (*plan.claims, *plan.controls)
             for why in dropped_pairs(history.runs, c)]
    for claim, res in zip(plan.claims, results, strict=True):
        if res is None:
            lines.append(f"{claim.name}: no completed valid pair")
            continue
        entry = next(entries)
        lines.append(f"{entry['role']} {claim.name}: " + effect_text(res.effect, claim.metric.title) +
                     f" -> {entry['decision']}" + (f" (Holm p {entry['p_holm']:.3g})" if "p_holm" in entry else ""))
        if res.excluded_work is not None:
            lines += [f"  left out of {claim.name}: {name}" for name in res.excluded_work.requests]
            lines.append(f"  {claim.name} on every request: {res.excluded_work.consequence}")
    for claim, res in zip(plan.controls, controls, strict=True):
        lines.append(f"control {claim.name}: " + (effect_text(res.effect, claim.metric.title) + " -> " +
                                                   control_rows[id(res)]["reading"]
                                                   if res else "not run or no completed valid pair"))
    headline = headline_entries(history, plan, results, p_i)
    blocked = blocked_reading(history, failure, repeats)
    if blocked is not None:
        return replace(blocked, effect=primary.effect if primary else None, details=details, lines=tuple(lines),
                       headline=tuple(headline))
    if primary is None:
        excluded = excluded_runs(history.runs, [x for c in plan.claims for x in (c.baseline, c.treatment)])
        why = ("client-bound here: every pair has an invalid arm run, so no figure is given" if excluded
               else "no completed valid A/B pair")
        return Reading(evidence_level="precheck", decision="blocked", details=details, lines=lines,
                       failure=Failure(stage="report", kind="client_bottleneck" if excluded else "error", message=why),
                       invalid_reasons=[why, *excluded], summary=why)
    decision, summary = primary.decision, (f"{primary.claim.treatment} {primary.claim.metric.title} is "
                                           f"{primary.effect.value:.3f}x {primary.claim.baseline} "
                                           f"({primary.reason}): {primary.decision}")
    moved = [c for c in details["controls"] if c["shows_effect"]]
    if moved and decision in ("adopt", "reject"):
        decision = "inconclusive"
        summary += (f"; capped: the control {moved[0]['name']} is {moved[0]['equivalence']} "
                    f"(margin {moved[0]['equivalence_margin']:.1%}), so it could explain a material share "
                    "of the effect")
        details["vetoed_by"] = moved[0]["name"]
    elif details["controls"]:
        summary += "; controls " + ", ".join(f"{c['name']} {c['equivalence']}" for c in details["controls"])
    return Reading(evidence_level=primary.evidence_level, decision=decision, summary=summary, effect=primary.effect,
                   repeats=repeats, details=details, lines=lines, headline=headline,
                   excluded_work=primary.excluded_work)


def claim_figures(history: History, plan: Plan, title: str) -> dict[str, Callable[[Path], Any]]:
    """The CDF of the first claim's per-request metric in every arm a claim or control names."""
    metric = plan.claims[0].metric if plan.claims else None
    if metric is None or metric.samples is None:  # not a per-request metric
        return {}
    samples = metric.samples
    labels = list(dict.fromkeys(x for c in (*plan.claims, *plan.controls) for x in (c.baseline, c.treatment)))
    series = {label: [v for r in completed_runs(history.runs, label) for v in samples(r.records)]
              for label in labels}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return {}
    base = metric.name.split(".")[0]
    name = base.removesuffix("_ms").upper()

    def draw(path: Path) -> None:
        from harness.report.plots import cdf_png

        cdf_png(series, path, title=f"{title}: {name} CDF (all repeats)", xlabel=f"{name} (ms, log scale)")
    return {f"{base.removesuffix('_ms')}_cdf.png": draw}


def next_step_key(reading: Reading, next_steps: Mapping[str, str]) -> str:
    """The next step a reading gets: "aborted" for an interrupted run, "vetoed" where a control moved beyond its
    band (one only too wide to show equivalence gets the decision's own: narrow it), else its decision's."""
    if reading.failure is not None and reading.failure.kind == "aborted":
        return "aborted"
    veto = next((c for c in reading.details.get("controls") or () if c["name"] == reading.details.get("vetoed_by")),
                None)
    return "vetoed" if veto and veto["equivalence"] == "moved" and "vetoed" in next_steps else reading.decision


def top_result(history: History, plan: Plan, reading: Reading, *, semantic_id: str, run_id: str,
               next_steps: Mapping[str, str], protocol: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The bench's top-level result (``comparison`` or ``sweep``), validated."""
    runs = history.runs
    treatment = plan.claims[0].treatment if plan.claims else None
    reference = next((r.result for r in runs if r.label == treatment), runs[0].result)
    ident = reference.identity.to_dict()
    ident.update(run_label=plan.run_label or ident["run_label"], run_id=run_id)
    workload = dict(reference.workload.to_dict(), repeats=protocol["repeats"])
    terminations: Counter[str] = Counter()
    for run in runs:
        terminations.update(run.result.correctness.termination_counts)
    key = next_step_key(reading, next_steps)
    conclusion = Conclusion(
        evidence_level=reading.evidence_level, decision=reading.decision,  # type: ignore[arg-type]
        next_step=reading.next_step or next_steps.get(key, next_steps.get("blocked", "read the summary")),
        failure=reading.failure,
        valid=not reading.invalid_reasons, invalid_reasons=list(reading.invalid_reasons),
        repeats=reading.repeats, effect=reading.effect, summary=reading.summary, excluded_work=reading.excluded_work)
    if conclusion.evidence_level == "precheck":
        conclusion.repeats = None
    no_quality = {} if reading.quality else {"quality": "no reference outputs for this workload"}
    return build_result(
        kind=reading.kind,  # type: ignore[arg-type]
        identity={**ident, "created_utc": utc_now()}, workload=workload, environment=reference.environment,
        performance=Performance.not_applicable(f"a {reading.kind}; per-arm distributions are in the arm results"),
        correctness=Correctness(output_count=sum(r.completed for r in runs), termination_counts=dict(terminations),
                                quality=reading.quality,
                                null_reasons=no_quality),
        conclusion=conclusion,
        details={"protocol": protocol, "headline": list(reading.headline), **reading.details,
                 "arm_runs": [arm_run_entry(r) for r in runs], **extra},
    )


def arm_run_entry(run: ArmRun) -> dict[str, Any]:
    prefix = run.result.detail("server_metrics", "prefix_cache") or {}
    return {"label": run.label, "repeat": run.repeat, "server": run.server, "workload": run.workload,
            "result": str(run.result_path), "requests_completed": run.completed, "valid": run.valid,
            "prefix_cache_hit_rate": prefix.get("hit_rate"), "seconds": round(run.seconds, 1),
            "failure": run.failure.kind if run.failure else None}


def arm_values(runs: Sequence[ArmRun], label: str, metrics: Sequence[Metric]) -> dict[str, float | None]:
    done = completed_runs(runs, label)
    return {m.name: m.value(done) for m in metrics}
