"""A claim read against its margin: the paired effect, its evidence level, controls as equivalence tests, Holm.

``claim_effect`` pairs the repeats where both arms completed and were valid (an invalid
arm run is left out of every effect it would distort, and listed; so is a valid pair that has no figure: an arm
without a sample of the metric, a None or 0 per-run figure), computes the paired
effect (``stats``) and applies ``stats.decide`` with the claim's margin and the design's
evidence level; a cross-start claim whose metric the cited bench-00 runs give a start-to-start variance for carries
``2·σ²_start`` in its interval (``pooled_by_start_variance``, evidence ``start-pooled``, which decides like paired);
without one it stays ``repeated``. ``control_entry`` reads a control as a TOST (a cross-start one with the same
variance), and a cross-start control without a start variance as not judged; ``secondary_entries`` Holm-corrects
the secondary claims. A run whose client stalled is read without the requests whose figures a stall could move, and
the claim again on every request: a decision stands only when both agree
(``harness.bench.exclusion``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.bench.exclusion import excluded_names, excluded_work, kept, usable
from harness.bench.metrics import Metric
from harness.bench.records import ArmRun
from harness.bench.spec import Claim, Plan
from harness.bench.startcontrol import with_start_variance
from harness.bench.stats import (
    CONTROL_SHARE,
    DEFAULT_CONFIDENCE,
    NO_EFFECT_RATIO,
    Better,
    Design,
    PairedEffect,
    RepeatSamples,
    band,
    control_margin,
    decide,
    equivalent,
    finding,
    holm,
    min_requests,
    p_beyond,
    paired_ratio_effect,
    repeat_ratio_effect,
)
from harness.contract import Effect, ExcludedWork

if TYPE_CHECKING:
    from harness.bench.startcontrol import StartVariance

VALIDITY_CONSEQUENCE = ("invalid arm runs are left out of every effect and figure (listed under validity.excluded); "
                        "requests a client stall held are left out of the figures it could move, and the claim "
                        "is read again with them (validity.excluded_requests, decision_all)")


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    effect: Effect
    decision: str
    evidence_level: str
    reason: str
    per_repeat: tuple[float, ...]
    design: str = "interleaved"
    margin: float = 0.0
    finding: str = "undetermined"
    stats: PairedEffect | None = None
    excluded: tuple[str, ...] = ()
    start_control: dict[str, Any] | None = None  # the pooled start variance in this cross-start claim's interval
    dropped: tuple[str, ...] = ()  # valid pairs left out: an arm without a sample of the metric, a None or 0 figure
    excluded_work: ExcludedWork | None = None  # requests a client stall held, and the claim read with them

    def to_dict(self) -> dict[str, Any]:
        eff = self.stats
        return {"name": self.claim.name, "metric": self.claim.metric.name, "baseline": self.claim.baseline,
                "treatment": self.claim.treatment, "effect": self.effect.to_dict(), "decision": self.decision,
                "evidence_level": self.evidence_level, "reason": self.reason, "per_repeat_ratio": list(self.per_repeat),
                "design": self.design, "margin": self.margin, "margin_band": list(band(self.margin)),
                "finding": self.finding, "unit": eff.unit if eff else None, "n_repeats": self.effect.n_pairs,
                "n_requests": eff.n_requests if eff else None, "method": self.effect.method,
                "p_sign_flip": eff.p_sign if eff else None,
                "request_level_ci": list(eff.request_ci) if eff and eff.request_ci else None,
                "request_design": eff.request_design if eff and eff.request_ci else None,
                "validity": {"consequence": VALIDITY_CONSEQUENCE, "excluded": list(self.excluded),
                             "dropped": list(self.dropped),
                             **({"excluded_requests": self.excluded_work.requests,
                                 "decision_all": self.excluded_work.decision_all,
                                 "decision_kept": self.excluded_work.decision_kept,
                                 "effect_all": self.excluded_work.effect_all.to_dict(),
                                 "agree": self.excluded_work.agree}
                                if self.excluded_work and self.excluded_work.effect_all else {})},
                "start_control": self.start_control}


def paired_runs(runs: Sequence[ArmRun], a: str, b: str, metric: Metric | None = None) -> list[tuple[ArmRun, ArmRun]]:
    """(baseline run, treatment run) per repeat where both arms completed, without failure, and valid (for
    ``metric``: or invalid only by client stalls that left its figures enough requests)."""
    by_key = {(r.label, r.repeat): r for r in runs if usable(r, metric)}
    repeats = sorted({r.repeat for r in runs})
    return [(by_key[(a, k)], by_key[(b, k)]) for k in repeats if (a, k) in by_key and (b, k) in by_key]


def excluded_runs(runs: Sequence[ArmRun], labels: Sequence[str], metric: Metric | None = None) -> list[str]:
    """The arm runs of ``labels`` left out as invalid (for ``metric``), with their reasons."""
    out = []
    for r in runs:
        if r.label in labels and not r.failure and r.records and not usable(r, metric):
            why = "; ".join(r.result.conclusion.invalid_reasons) or "invalid"
            out.append(f"{r.label} repeat {r.repeat}: {why}")
    return out


def design_of(plan: Plan | None, claim: Claim) -> Design:
    """How the claim's arms met servers: interleaved on one start (the same server variant in one phase), on
    alternating restarts (each phase holds one repeat), or across single starts — two variants kept up side by
    side are two starts too, so their start-to-start shift is confounded with the effect."""
    if plan is None:
        return "interleaved"
    arms = {a.label: a for a in plan.arms}
    a, b = arms[claim.baseline].server, arms[claim.treatment].server
    if a == b and any(a in p.servers for p in plan.phases):
        return "interleaved"
    touching = [p for p in plan.phases if a in p.servers or b in p.servers]
    if touching and all(not callable(p.steps) and len({r for r, _ in p.steps}) == 1 for p in touching):
        return "alternating"
    return "cross-start"


def margin_of(claim: Claim, override: float | None = None) -> float:
    return override if override is not None else claim.margin if claim.margin is not None else claim.metric.margin


def _samples(metric: Metric, claim: Claim, pairs: Sequence[tuple[ArmRun, ArmRun]]
             ) -> tuple[list[RepeatSamples], list[str]]:
    """The per-request samples of each pair, and each pair dropped because an arm had no sample of the metric."""
    out, dropped = [], []
    for a, b in pairs:
        xa, xb = metric.by_request(a.records), metric.by_request(b.records)
        strata = {r.index: claim.strata(r) for r in a.records} if claim.strata else {}
        if xa and xb:
            out.append(RepeatSamples(xa, xb, strata))
        else:
            empty = " and ".join(r.label for r, x in ((a, xa), (b, xb)) if not x)
            dropped.append(f"repeat {a.repeat}: {empty} has no {metric.name} sample (pair left out)")
    return out, dropped


def _figures(metric: Metric, pairs: Sequence[tuple[ArmRun, ArmRun]]) -> tuple[list[tuple[float, float]], list[str]]:
    """The per-run figure pairs, and each pair dropped because an arm's figure is None or 0 (no ratio)."""
    values, dropped = [], []
    for a, b in pairs:
        x, y = metric.pair_values(a, b)
        if x and y:
            values.append((x, y))
        else:
            dropped.append(f"repeat {a.repeat}: {metric.name} {a.label} {x}, {b.label} {y} (pair left out)")
    return values, dropped


def dropped_pairs(runs: Sequence[ArmRun], claim: Claim) -> list[str]:
    """The valid completed pairs a claim cannot use (an arm without a sample, a None or 0 figure), each named."""
    pairs = [(kept(a, claim.metric), kept(b, claim.metric))
             for a, b in paired_runs(runs, claim.baseline, claim.treatment, claim.metric)]
    if claim.metric.per_request:
        return _samples(claim.metric, claim, pairs)[1]
    return _figures(claim.metric, pairs)[1]


def pooled_by_start_variance(eff: PairedEffect, metric: str, design: Design, start: StartVariance | None
                             ) -> tuple[PairedEffect, Design, dict[str, Any] | None, str]:
    """A cross-start effect with the pooled start-to-start variance of its metric in its interval (then
    ``cross-start-pooled``), with the record and the sentence that say so; any other effect as it is."""
    if design != "cross-start" or start is None or eff.log_se is None:
        return eff, design, None, ""
    found = start.of(metric)
    if found is None:
        return eff, design, None, f"the cited bench-00 runs give no start-to-start variance of {metric}"
    var, df = found
    pooled = with_start_variance(eff, var, df)
    sd, starts_df = math.expm1(math.sqrt(var)), start.pooled(metric).df  # type: ignore[union-attr]
    record = {"run_ids": start.run_ids, "manifests": [c.get("manifest") for _, c, _ in start.runs],
              "start_var_log": var, "start_df": starts_df, "start_df_effective": df, "start_sd_pct": 100 * sd,
              "df": pooled.df}
    return (pooled, "cross-start-pooled", record,
            f"cross-start, with the start-to-start variance pooled from bench-00 run(s) {', '.join(start.run_ids)} "
            f"(σ_start {sd:.1%}, {starts_df:g} df from the starts, {df:.1f} effective; Welch–Satterthwaite "
            f"{pooled.df:.1f} df)")


def claim_effect(runs: Sequence[ArmRun], claim: Claim, *, seed: int, resamples: int,
                 design: Design = "interleaved", margin: float | None = None,
                 start: StartVariance | None = None) -> ClaimResult | None:
    """The claim's paired effect and verdict, or None without a completed valid pair (``start``: the pooled
    start-to-start variance a cross-start claim's interval carries). Read on each run's kept requests; where a
    client stall excluded some, read again on every request, and an adopt or reject that does not survive it is
    capped."""
    pairs = paired_runs(runs, claim.baseline, claim.treatment, claim.metric)
    names = excluded_names(pairs, claim.metric)
    kept_pairs = [(kept(a, claim.metric), kept(b, claim.metric)) for a, b in pairs]
    res = _read_claim(runs, kept_pairs, claim, seed=seed, resamples=resamples, design=design, margin=margin,
                      start=start)
    every = (_read_claim(runs, pairs, claim, seed=seed, resamples=resamples, design=design, margin=margin, start=start)
             if names and res is not None else None)
    if res is None or every is None:
        return res
    work, cap = excluded_work(names, res.decision, every.decision, every.effect)
    if cap is None:
        return dataclasses.replace(res, excluded_work=work)
    return dataclasses.replace(res, excluded_work=work, decision="inconclusive", reason=f"{res.reason}; {cap}")


def _read_claim(runs: Sequence[ArmRun], pairs: Sequence[tuple[ArmRun, ArmRun]], claim: Claim, *, seed: int,
                resamples: int, design: Design, margin: float | None, start: StartVariance | None
                ) -> ClaimResult | None:
    """``claim_effect`` over the given pairs."""
    metric = claim.metric
    refuse = ""
    if metric.per_request:
        reps, dropped = _samples(metric, claim, pairs)
        if not reps:
            return None
        assert metric.statistic is not None, f"{metric.name}: a per-request metric has a statistic"
        eff = paired_ratio_effect(reps, resamples=resamples, seed=seed, statistic=metric.statistic, block=claim.block)
        need = min_requests(eff.statistic)
        if (eff.n_requests or 0) < need:
            refuse = (f"{eff.statistic} of {eff.n_requests} requests is the max of {eff.n_requests}, not a "
                      f"{eff.statistic} (needs >= {need} per arm and repeat)")
    else:
        values, dropped = _figures(metric, pairs)  # a throughput pair over one window
        if not values:
            return None
        eff = repeat_ratio_effect(values, resamples=resamples, seed=seed, name=metric.name)
    m = margin_of(claim, margin)
    eff, level_design, pooled, note = pooled_by_start_variance(eff, metric.name, design, start)
    verdict = decide(eff, better=metric.better, margin=m, design=level_design, refuse=refuse)
    reason = f"{verdict.reason}; {note}" if note else verdict.reason
    effect = Effect(metric=metric.name, estimator=f"ratio B/A of {eff.statistic} per repeat, geometric mean",
                    value=eff.value, ci_low=eff.ci_low, ci_high=eff.ci_high, confidence=eff.confidence,
                    no_effect=NO_EFFECT_RATIO, better=metric.better, method=eff.method, n_pairs=eff.n_pairs,
                    arm_a=claim.baseline, arm_b=claim.treatment, margin=m, unit=eff.unit,
                    n_requests=eff.n_requests, p_value=eff.p_sign, finding=verdict.finding)
    return ClaimResult(claim, effect, verdict.decision, verdict.evidence_level, reason, eff.per_repeat,
                       level_design, m, verdict.finding, eff,
                       tuple(excluded_runs(runs, (claim.baseline, claim.treatment), metric)),
                       pooled, tuple(dropped))


def primary_index(plan: Plan) -> int:
    """The bench's one primary claim: the one marked ``primary``, else the first."""
    return next((i for i, c in enumerate(plan.claims) if c.primary), 0)


def control_entry(res: ClaimResult, primary: ClaimResult | None) -> dict[str, Any]:
    """A control read as an equivalence test against its margin (or a share of the primary effect)."""
    m = control_margin(primary.effect.value if primary else None, res.margin)
    stats = res.stats
    cross = res.design == "cross-start"  # one start pair without the start variance: its shift is not in the interval
    if stats is None or stats.unit != "repeat":
        status, why = "not judged", "equivalence needs at least 2 repeats (a repeat-level interval)"
    elif finding(stats, better=res.claim.metric.better, margin=m) in ("material gain", "material loss"):
        status, why = "moved", f"interval beyond the equivalence band [{band(m)[0]:.3f}, {band(m)[1]:.3f}]" + (
            " (on another server start: the start effect may be part of it)" if cross else "")
    elif cross:
        status, why = "not judged", ("it ran on another server start than its baseline and no start-to-start "
                                     "variance is cited, so its interval cannot show equivalence (make bench-00 on "
                                     "this host pools one in; alternating restarts put the start effect in the "
                                     "per-repeat variance)")
    elif equivalent(stats, m):
        status, why = "equivalent", f"interval inside the equivalence band [{band(m)[0]:.3f}, {band(m)[1]:.3f}]"
    else:
        status, why = "not shown equivalent", f"interval overlaps the band [{band(m)[0]:.3f}, {band(m)[1]:.3f}]"
    # a cross-start control without a start variance that did not move beyond its band is not judged: it neither
    # clears nor vetoes the primary; one that moved still vetoes (cautious: the start effect may be part of the move)
    return {**res.to_dict(), "equivalence_margin": m, "equivalence": status,
            "shows_effect": status != "equivalent" and not (cross and status == "not judged"),
            "reading": f"{status}: {why} (TOST at {res.effect.confidence:.0%}; margin = max(stated "
                       f"{res.margin:.1%}, {CONTROL_SHARE:.0%} of the primary log effect))"}


def secondary_entries(results: Sequence[ClaimResult | None], primary: int) -> list[dict[str, Any]]:
    """Every claim with its Holm-adjusted p over the secondary family; a secondary decides only below alpha/2."""
    alpha = (1 - DEFAULT_CONFIDENCE) / 2
    family = [i for i, r in enumerate(results) if r is not None and i != primary]
    raw: dict[int, float] = {}
    for i, r in enumerate(results):
        if r is None or i == primary:
            continue
        side: Better = "higher" if (r.claim.metric.better == "lower") == (r.decision == "reject") else "lower"
        raw[i] = p_beyond(r.stats, better=side, margin=r.margin) if r.stats else 1.0
    adjusted = dict(zip(family, holm([raw[i] for i in family]), strict=True))
    out = []
    for i, r in enumerate(results):
        if r is None:
            continue
        entry = {**r.to_dict(), "role": "primary" if i == primary else "secondary"}
        if i != primary:
            entry.update(p_beyond_margin=raw[i], p_holm=adjusted[i], family_size=len(family))
            if r.decision in ("adopt", "reject") and adjusted[i] >= alpha:
                entry.update(decision="inconclusive", reason=f"{r.reason}; Holm-adjusted p {adjusted[i]:.3g} over "
                                                             f"{len(family)} secondary claims >= {alpha:g}")
        out.append(entry)
    return out
