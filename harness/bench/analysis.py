"""From arm runs to what a bench concludes: paired effects of claims, controls, and the one top-level result.

A claim's effect is the paired ratio treatment/baseline of its metric over the
repeats where both arms completed (``stats``: two-level bootstrap for per-request
metrics, repeats only for per-run ones), read by ``stats.decide``. A control must
show no effect: when its interval lies on the claim's better side, an ``adopt``
becomes ``inconclusive`` (the arms differ by more than the treatment). A failed arm
run blocks the decision; completed pairs are still reported.

The top-level result is built once, complete, and validated once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.bench.metrics import Metric
from harness.bench.records import ArmRun, Reading, completed_runs
from harness.bench.spec import Claim, History, Plan
from harness.bench.stats import (
    NO_EFFECT_RATIO,
    decide,
    paired_ratio_effect,
    repeat_ratio_effect,
)
from harness.contract import (
    Conclusion,
    Correctness,
    Effect,
    Failure,
    Performance,
    build_result,
)
from harness.contract.result import utc_now


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    effect: Effect
    decision: str
    evidence_level: str
    reason: str
    per_repeat: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.claim.name, "metric": self.claim.metric.name, "baseline": self.claim.baseline,
                "treatment": self.claim.treatment, "effect": self.effect.to_dict(), "decision": self.decision,
                "evidence_level": self.evidence_level, "reason": self.reason, "per_repeat_ratio": list(self.per_repeat)}


def paired_runs(runs: Sequence[ArmRun], a: str, b: str) -> list[tuple[ArmRun, ArmRun]]:
    """(baseline run, treatment run) per repeat where both arms completed without failure."""
    by_key = {(r.label, r.repeat): r for r in runs if not r.failure and r.records}
    repeats = sorted({r.repeat for r in runs})
    return [(by_key[(a, k)], by_key[(b, k)]) for k in repeats if (a, k) in by_key and (b, k) in by_key]


def claim_effect(runs: Sequence[ArmRun], claim: Claim, *, seed: int, resamples: int) -> ClaimResult | None:
    """The claim's paired effect and verdict, or None without a completed pair."""
    metric = claim.metric
    pairs = paired_runs(runs, claim.baseline, claim.treatment)
    if metric.per_request:
        sample_pairs = [(metric.samples(a.records), metric.samples(b.records)) for a, b in pairs]
        sample_pairs = [(x, y) for x, y in sample_pairs if x and y]
        if not sample_pairs:
            return None
        eff = paired_ratio_effect(sample_pairs, resamples=resamples, seed=seed, statistic=metric.statistic)
    else:
        values = [(metric.of_run(a), metric.of_run(b)) for a, b in pairs]
        values = [(x, y) for x, y in values if x and y]
        if not values:
            return None
        eff = repeat_ratio_effect(values, resamples=resamples, seed=seed, name=metric.name)
    verdict = decide(eff, better=metric.better)
    effect = Effect(metric=metric.name, estimator=f"ratio B/A of {eff.statistic} per repeat, geometric mean",
                    value=eff.value, ci_low=eff.ci_low, ci_high=eff.ci_high, confidence=eff.confidence,
                    no_effect=NO_EFFECT_RATIO, better=metric.better, method=eff.method, n_pairs=eff.n_pairs,
                    arm_a=claim.baseline, arm_b=claim.treatment)
    return ClaimResult(claim, effect, verdict.decision, verdict.evidence_level, verdict.reason, eff.per_repeat)


def on_better_side(effect: Effect) -> bool:
    return effect.ci_high < effect.no_effect if effect.better == "lower" else effect.ci_low > effect.no_effect


def effect_text(effect: Effect, metric_title: str = "") -> str:
    return (f"{effect.arm_b} / {effect.arm_a} {metric_title or effect.metric} = {effect.value:.3f} "
            f"({effect.confidence:.0%} CI [{effect.ci_low:.3f}, {effect.ci_high:.3f}], {effect.n_pairs} pairs)")


def first_failure(runs: Sequence[ArmRun]) -> ArmRun | None:
    return next((r for r in runs if r.failure), None)


def blocked_reading(history: History, failure: Failure | None, repeats: int) -> Reading | None:
    """Blocked when an arm run failed or a server did not start: completed pairs are kept, no claim is made."""
    failed = first_failure(history.runs)
    if failed is not None:
        first = failed.failure or {}
        reason = f"{failed.label} repeat {failed.repeat}: {first.get('kind')}"
        cause = Failure(**first)
    elif failure is not None:
        reason, cause = f"{failure.stage}: {failure.kind}", failure
    else:
        return None
    return Reading(evidence_level="single", decision="blocked", failure=cause, invalid_reasons=[reason],
                   repeats=repeats, summary=f"blocked: {reason}; completed pairs are kept but no claim is made")


def read_claims(history: History, plan: Plan, *, seed: int, resamples: int, repeats: int,
                failure: Failure | None = None) -> Reading:
    """The first claim is the headline; the others and every control go into ``details``."""
    results = [claim_effect(history.runs, c, seed=seed + i, resamples=resamples) for i, c in enumerate(plan.claims)]
    controls = [claim_effect(history.runs, c, seed=seed + 100 + i, resamples=resamples)
                for i, c in enumerate(plan.controls)]
    details: dict[str, Any] = {
        "claims": [r.to_dict() for r in results if r],
        "controls": [{**r.to_dict(), "shows_effect": on_better_side(r.effect),
                      "reading": ("moves like the treatment (unexpected)" if on_better_side(r.effect)
                                  else "no gain (as expected)")} for r in controls if r],
    }
    lines = []
    for claim, res in zip(plan.claims, results, strict=True):
        lines.append(f"{claim.name}: " + (effect_text(res.effect, claim.metric.title) + f" -> {res.decision}"
                                           if res else "no completed pair"))
    for claim, res in zip(plan.controls, controls, strict=True):
        lines.append(f"control {claim.name}: " + (effect_text(res.effect, claim.metric.title) + " -> " +
                                                   details["controls"][controls.index(res)]["reading"]
                                                   if res else "not run or no completed pair"))
    headline = [{"name": f"effect on {r.effect.metric}", "value": r.effect.value, "unit": "ratio",
                 "ci_low": r.effect.ci_low, "ci_high": r.effect.ci_high, "arm": f"{r.effect.arm_b} vs {r.effect.arm_a}"}
                for r in results if r]
    if plan.claims:  # each compared arm's figure on the headline metric
        metric = plan.claims[0].metric
        for label in dict.fromkeys(x for c in plan.claims for x in (c.baseline, c.treatment)):
            done = completed_runs(history.runs, label)
            if done:
                headline.append({"name": metric.title, "value": metric.value(done), "unit": metric.unit, "arm": label})
    primary = results[0] if results else None
    blocked = blocked_reading(history, failure, repeats)
    if blocked is not None:
        return replace(blocked, effect=primary.effect if primary else None, details=details, lines=tuple(lines),
                       headline=tuple(headline))
    if primary is None:
        return Reading(evidence_level="precheck", decision="blocked", details=details, lines=lines,
                       failure=Failure(stage="report", kind="error", message="no completed A/B pair"),
                       invalid_reasons=["no completed A/B pair"], summary="no completed A/B pair")
    decision, summary = primary.decision, (f"{primary.claim.treatment} {primary.claim.metric.title} is "
                                           f"{primary.effect.value:.3f}x {primary.claim.baseline} "
                                           f"({primary.reason}): {primary.decision}")
    moved = [c for c in details["controls"] if c["shows_effect"]]
    if moved and decision == "adopt":
        decision = "inconclusive"
        summary += f"; vetoed: the control {moved[0]['name']} shows a gain too"
        details["vetoed_by"] = moved[0]["name"]
    return Reading(evidence_level=primary.evidence_level, decision=decision, summary=summary, effect=primary.effect,
                   repeats=repeats, details=details, lines=lines, headline=headline)


def claim_figures(history: History, plan: Plan, title: str) -> dict[str, Callable[[Path], Any]]:
    """The CDF of the first claim's per-request metric in every arm a claim or control names."""
    if not plan.claims or not plan.claims[0].metric.per_request:
        return {}
    metric = plan.claims[0].metric
    labels = list(dict.fromkeys(x for c in (*plan.claims, *plan.controls) for x in (c.baseline, c.treatment)))
    series = {label: [v for r in completed_runs(history.runs, label) for v in metric.samples(r.records)]
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


def top_result(history: History, plan: Plan, reading: Reading, *, semantic_id: str, run_id: str,
               next_steps: Mapping[str, str], protocol: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The bench's top-level result (``comparison`` or ``sweep``), validated."""
    runs = history.runs
    treatment = plan.claims[0].treatment if plan.claims else None
    reference = next((r.result for r in runs if r.label == treatment), runs[0].result)
    ident = dict(reference["identity"])
    ident.update(run_label=plan.run_label or ident["run_label"], run_id=run_id)
    workload = dict(reference["workload"], repeats=protocol["repeats"])
    terminations: Counter[str] = Counter()
    for run in runs:
        terminations.update(run.result["correctness"]["termination_counts"])
    key = ("aborted" if reading.failure is not None and reading.failure.kind == "aborted"
           else "vetoed" if reading.details.get("vetoed_by") and "vetoed" in next_steps else reading.decision)
    conclusion = Conclusion(
        evidence_level=reading.evidence_level, decision=reading.decision,  # type: ignore[arg-type]
        next_step=reading.next_step or next_steps.get(key, next_steps.get("blocked", "read the summary")),
        failure=reading.failure,
        valid=not reading.invalid_reasons, invalid_reasons=list(reading.invalid_reasons),
        repeats=reading.repeats, effect=reading.effect, summary=reading.summary)
    if conclusion.evidence_level == "precheck":
        conclusion.repeats = None
    return build_result(
        kind=reading.kind,  # type: ignore[arg-type]
        identity={**ident, "created_utc": utc_now()}, workload=workload, environment=reference["environment"],
        performance=Performance.not_applicable(f"a {reading.kind}; per-arm distributions are in the arm results"),
        correctness=Correctness(output_count=sum(r.completed for r in runs), termination_counts=dict(terminations),
                                quality=reading.quality,
                                null_reasons={} if reading.quality else {"quality": "no reference outputs for this workload"}),
        conclusion=conclusion,
        details={"protocol": protocol, "headline": list(reading.headline), **reading.details,
                 "arm_runs": [arm_run_entry(r) for r in runs], **extra},
    )


def arm_run_entry(run: ArmRun) -> dict[str, Any]:
    prefix = ((run.result.get("details") or {}).get("server_metrics") or {}).get("prefix_cache") or {}
    return {"label": run.label, "repeat": run.repeat, "server": run.server, "workload": run.workload,
            "result": str(run.result_path), "requests_completed": run.completed, "valid": run.valid,
            "prefix_cache_hit_rate": prefix.get("hit_rate"), "seconds": round(run.seconds, 1),
            "failure": run.failure["kind"] if run.failure else None}


def arm_values(runs: Sequence[ArmRun], label: str, metrics: Sequence[Metric]) -> dict[str, float | None]:
    done = completed_runs(runs, label)
    return {m.name: m.value(done) for m in metrics}
