"""bench-68's table and top-level decision: one row per workload x speculative variant.

Pure over the rows (claim effects, pooled acceptance, predictions, greedy agreement); the
decision rule is stated in ``RULE`` and recorded with every result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from tabulate import tabulate

from harness.bench.analysis import ClaimResult
from harness.bench.benches.bench68.acceptance import Acceptance, Agreement, Prediction
from harness.bench.benches.bench68.identity import CHECK_BASIS
from harness.bench.lib.prediction import Judged, summarise, summary_line
from harness.bench.stats import DECIDING, holm, p_beyond
from harness.contract import Effect

RULE = ("per workload x speculative variant, the paired E2E p50 ratio (variant / baseline measured alongside) "
        "is read against its margin: adopt only when its 95% interval lies beyond the margin band with >= 5 paired "
        "repeats and the variant passes greedy identity, judged in float32 against speculation off "
        "(details.identity.rule); the primary row (the first variant on the copy workload) decides the top level "
        "and is the headline; every other row is secondary, Holm-corrected over the family (adopt/reject only with "
        "an adjusted p < 0.025) and never the headline; the natural-text "
        "negative control is read on TPOT p50, is outside the family and never decides, and an n-gram adopt needs it "
        "to hold; a row whose float32 outputs differ from speculation off's beyond the stated tolerance is rejected "
        "whatever its speed (another computation, not a faster one; at the top level a reject needs paired evidence, "
        "else it reads inconclusive); a row with no float32 identity verdict is never adopted")
ALPHA = 0.025  # one-sided, the side of a 95 % two-sided interval


@dataclass(frozen=True)
class Row:
    workload: str
    arm: str
    refused: str | None
    e2e: ClaimResult | None
    tpot: ClaimResult | None
    tpot_ms: tuple[float | None, float | None]  # (baseline, variant) p50 over the pooled repeats
    e2e_ms: tuple[float | None, float | None]
    acceptance: Acceptance | None
    prediction: Prediction | None
    agreement: Agreement  # the greedy-identity verdict, judged in float32 (identity.py)
    baseline_agreement: Agreement
    requested_tokens: int | None = None  # num_speculative_tokens asked for
    tpot_mean: ClaimResult | None = None  # paired mean-TPOT ratio: the served speedup (a mean, as predicted)
    calibration: bool = False  # the arm β was fitted on: its prediction matches by construction
    role: str = "secondary"  # the primary row decides the bench; the others are Holm-corrected
    holm_p: float | None = None  # a secondary row's Holm-adjusted p over the family
    control: bool = False  # the negative control's row: read on per-token figures, never in the family
    tokens_per_s: ClaimResult | None = None  # paired output tokens/s ratio (the control's second per-token claim)
    capped: str = ""  # why an adopt of this row is capped at inconclusive (the negative control did not hold)
    measured_agreement: Agreement | None = None  # the measured arms' own, where they were not float32: described

    @property
    def deciding(self) -> ClaimResult | None:
        """The claim the row is read on: E2E p50, or TPOT p50 on the control (its answer lengths differ)."""
        return self.tpot if self.control else self.e2e

    @property
    def effective_tokens(self) -> int | None:
        """Draft positions the engine reports acceptance for: the num_speculative_tokens it applied."""
        return len(self.acceptance.accepted_per_position) if self.acceptance else None

    @property
    def label(self) -> str:
        return f"{self.workload}/{self.arm}"

    @property
    def mismatched(self) -> bool:
        return self.agreement.compared > 0 and not self.agreement.passed

    @property
    def decision(self) -> str:
        if self.refused is not None:
            return "capability_missing"
        claim = self.deciding
        if claim is None:
            return "no completed pair"
        if self.acceptance is None:
            return "not applied (no spec-decode counters)"
        if self.mismatched:
            return "reject (outputs differ)"
        if self.capped and claim.decision == "adopt":
            return "inconclusive (control failed)"
        if not self.agreement.passed and claim.decision == "adopt":
            return "inconclusive (identity unchecked)"
        if self.holm_p is not None and claim.decision in ("adopt", "reject") and self.holm_p >= ALPHA:
            return "inconclusive (Holm)"
        return claim.decision

    @property
    def served_speedup(self) -> tuple[float, float, float] | None:
        """1 / paired mean-TPOT ratio (the p50 ratio where no mean was read), with its interval (low, high)."""
        claim = self.tpot_mean or self.tpot
        if claim is None:
            return None
        eff = claim.effect
        return 1 / eff.value, 1 / eff.ci_high, 1 / eff.ci_low

    def judged(self) -> Judged | None:
        """The prediction against the served speedup's interval; mismatched outputs and the fit's arm left out."""
        served = self.served_speedup
        if served is None or self.prediction is None:
            return None
        why = ("outputs differ from the baseline's" if self.mismatched else
               "verification cost fitted on it" if self.calibration else "")
        return Judged(self.label, self.prediction.speedup, served[0], served[1], served[2], why)

    def to_dict(self) -> dict[str, Any]:
        served, judged = self.served_speedup, self.judged()
        return {"workload": self.workload, "arm": self.arm, "decision": self.decision, "role": self.role,
                "p_holm": self.holm_p,
                "capability_missing": self.refused,
                "e2e_effect": self.e2e.to_dict() if self.e2e else None,
                "tpot_effect": self.tpot.to_dict() if self.tpot else None,
                "tokens_per_s_effect": self.tokens_per_s.to_dict() if self.tokens_per_s else None,
                "decided_on": None if self.deciding is None else self.deciding.claim.metric.name,
                "capped": self.capped or None,
                "tpot_p50_ms": {"baseline": self.tpot_ms[0], "variant": self.tpot_ms[1]},
                "e2e_p50_ms": {"baseline": self.e2e_ms[0], "variant": self.e2e_ms[1]},
                "acceptance": self.acceptance.to_dict() if self.acceptance else None,
                "num_speculative_tokens": {"requested": self.requested_tokens, "effective": self.effective_tokens,
                                           "source": "positions of vllm:spec_decode_num_accepted_tokens_per_pos"},
                "prediction": self.prediction.to_dict() if self.prediction else None,
                "served_speedup": None if served is None else
                {"value": round(served[0], 6), "ci_low": round(served[1], 6), "ci_high": round(served[2], 6),
                 "estimator": "1 / paired mean TPOT ratio" if self.tpot_mean else "1 / paired TPOT p50 ratio"},
                "prediction_judged": judged.to_dict() if judged else None,
                "greedy_agreement": self.agreement.to_dict(),
                "measured_agreement": self.measured_agreement.to_dict() if self.measured_agreement else None,
                "baseline_repeatability": self.baseline_agreement.to_dict()}


def _ratio(claim: ClaimResult | None) -> str:
    if claim is None:
        return "-"
    e = claim.effect
    return f"{e.value:.2f} [{e.ci_low:.2f}, {e.ci_high:.2f}]"


def _ms(pair: tuple[float | None, float | None], fmt: str) -> str:
    return " -> ".join("-" if v is None else format(v, fmt) for v in pair)


def _described(r: Row) -> str:
    """The measured arms' own agreement where they were not float32 (a description), else the verdict's."""
    a = r.measured_agreement or r.agreement
    return f"{a.identical}/{a.compared}" if a.compared else "-"


def row_lines(rows: Sequence[Row]) -> list[str]:
    """The per-workload, per-variant table and the predicted-vs-served lines."""
    table = []
    for r in rows:
        acc = r.acceptance
        ident = r.agreement
        table.append([r.workload, r.arm, "-" if acc is None or acc.rate is None else f"{acc.rate:.0%}",
                      "-" if acc is None or acc.mean_length is None else f"{acc.mean_length:.2f}",
                      _ms(r.tpot_ms, ".1f"), _ms(r.e2e_ms, ".0f"), _ratio(r.tpot), _ratio(r.e2e),
                      f"{ident.identical}/{ident.compared}" if ident.compared else "-", _described(r), r.decision])
    lines = [tabulate(table, headers=["workload", "variant", "acceptance", "mean accept len", "TPOT p50 ms off->var",
                                      "E2E p50 ms off->var", "TPOT ratio [95% CI]", "E2E ratio [95% CI]",
                                      "identical fp32", "identical as served", "decision"], tablefmt="github"),
             "", "predicted vs served speedup (served = 1 / paired mean-TPOT ratio; predicted = T / (D(g(c+b)+1) + "
             "undrafted passes), E = mean acceptance length, c as stated, b fitted on self-draft):"]
    for r in rows:
        p, served, verdict, acc = r.prediction, r.served_speedup, r.judged(), r.acceptance
        if r.refused is not None:
            lines.append(f"  {r.label}: capability_missing: {r.refused.splitlines()[0]}")
        elif acc is None and r.e2e is not None:
            lines.append(f"  {r.label}: speculation not applied: the engine exported no spec-decode counters")
        elif p is None or served is None or verdict is None:  # verdict is None exactly when p or served is
            lines.append(f"  {r.label}: no prediction (no drafts counted or no completed pair)")
        else:
            mc = f", MC E {p.monte_carlo[0]:.2f}±{p.monte_carlo[1]:.2f}" if p.monte_carlo else ""
            mean_length = cast(Acceptance, acc).mean_length  # a prediction is made only from a measured acceptance
            lines.append(
                f"  {r.label}: predicted {p.speedup:.2f}x (E {mean_length:.2f}{mc}, c {p.cost_ratio:.2f}, "
                f"{p.drafted_fraction:.0%} of passes drafted; iid formula {p.formula_speedup:.2f}x), served "
                f"{served[0]:.2f}x [{served[1]:.2f}, {served[2]:.2f}], error {verdict.error:+.0%}, "
                f"{'inside' if verdict.inside else 'outside'} the served interval"
                + (f" (left out: {verdict.excluded})" if verdict.excluded else "")
                + ("" if verdict.inside or verdict.excluded else f"; why it may miss: {p.miss_reason(*served[1:])}")
            )
    judged = [j for j in (r.judged() for r in rows) if j is not None]
    lines.append(summary_line("  predictions", summarise(judged)))
    return lines


@dataclass(frozen=True)
class Top:
    decision: str
    evidence_level: str
    summary: str
    effect: Effect | None
    headline: list[dict[str, Any]]
    lines: list[str]
    quality: dict[str, Any] | None
    mismatched: list[str]
    rule: str = RULE
    rows: tuple[Row, ...] = ()  # the rows with their roles and Holm-adjusted p


def with_roles(rows: Sequence[Row]) -> list[Row]:
    """The primary row (first on copy, else first run) and Holm-adjusted p for the secondaries."""
    ran = [i for i, r in enumerate(rows) if r.refused is None and r.e2e is not None and not r.control]
    if not ran:
        return [replace(r, role="control") if r.control else r for r in rows]
    primary = next((i for i in ran if rows[i].workload == "copy"), ran[0])
    family = [i for i in ran if i != primary]

    def p_of(r: Row) -> float:
        e = r.e2e
        if e is None or e.stats is None:
            return 1.0
        side: Literal["lower", "higher"] = "higher" if e.decision == "reject" else "lower"
        return p_beyond(e.stats, better=side, margin=e.margin)

    adjusted = dict(zip(family, holm([p_of(rows[i]) for i in family]), strict=True))
    return [
        replace(r, role="control" if r.control else "primary" if i == primary else "secondary", holm_p=adjusted.get(i))
        for i, r in enumerate(rows)
    ]


def _side_lines(ran: Sequence[tuple[Row, ClaimResult]]) -> list[str]:
    """Where each run row helps or hurts: its E2E interval's side (any repeat count)."""
    sides: dict[str, Callable[[Effect], bool]] = {
        "helps": lambda e: e.ci_high < 1,
        "hurts": lambda e: e.ci_low > 1,
        "no clear effect": lambda e: e.ci_low <= 1 <= e.ci_high,
    }
    lines = []
    for name, on_side in sides.items():
        group = [(r, c) for r, c in ran if on_side(c.effect)]
        if group:
            lines.append(
                f"{name} (E2E p50 interval {'below' if name == 'helps' else 'above' if name == 'hurts' else 'around'}"
                " 1): "
                + ", ".join(
                    f"{r.label} ({'control, TPOT ' if r.control else ''}x{c.effect.value:.2f}"
                    f"{', outputs differ' if r.mismatched else ''})" for r, c in group
                )
            )
    return lines


def _identity_key(r: Row) -> tuple[str, str]:
    """One verdict counted once: a float32 check speaks for its variant on every workload, measured arms per row."""
    return (r.arm, "" if r.agreement.basis == CHECK_BASIS else r.workload)


def _quality(ran: Sequence[Row], mismatched: Sequence[str], lines: list[str]) -> dict[str, Any] | None:
    """The greedy-identity quality over the judged verdicts (its line appended to ``lines``), or None."""
    verdicts = list({_identity_key(r): r.agreement for r in ran if r.agreement.compared}.values())
    described = [r.measured_agreement for r in ran if r.measured_agreement and r.measured_agreement.compared]
    if not verdicts:
        return None
    total, same = sum(a.compared for a in verdicts), sum(a.identical for a in verdicts)
    share = min(a.min_exact_share for a in verdicts)
    lines.append(
        f"greedy identity (float32, {'float32 check' if verdicts[0].basis == CHECK_BASIS else 'measured arms'}): "
        f"{same}/{total} speculative outputs equal speculation off's, tolerance {1 - share:.0%}"
        + (f"; differs for {', '.join(mismatched)}" if mismatched else "")
        + (f"; measured arms {sum(a.identical for a in described)}/{sum(a.compared for a in described)} equal "
           "their baseline's (described, not judged)" if described else "")
    )
    return {
        "metric": "greedy_agreement",
        "value": round(same / total, 6),
        "threshold": share,
        "passed": all(a.passed for a in verdicts),
        "reference": f"{total} speculative outputs against speculation off's, both served in float32 (temperature "
        f"0), output text per request index, exact match; passes at an exact-match share >= {share:g} per variant",
    }


def _headline(ordered: Sequence[tuple[Row, ClaimResult]]) -> list[dict[str, Any]]:
    return [
        {"name": r.label, "metric": c.effect.metric, "value": c.effect.value, "unit": "ratio",
         "ci_low": c.effect.ci_low, "ci_high": c.effect.ci_high, "arm": c.effect.arm_b, "role": r.role,
         "p_holm": r.holm_p, "interval_unit": c.effect.unit, "n_repeats": c.effect.n_pairs,
         "n_requests": c.effect.n_requests, "method": c.effect.method, "margin": c.margin,
         "excluded": list(c.excluded)}
        for r, c in ordered
    ]


def decide_top(rows: Sequence[Row]) -> Top:
    """The top-level decision from the rows, by ``RULE``."""
    rows = with_roles(rows)
    pairs = [(r, c) for r in rows if r.refused is None and (c := r.deciding) is not None]
    ran = [r for r, _ in pairs]
    lines = _side_lines(pairs)
    refused = sorted({r.arm for r in rows if r.refused is not None})
    if refused:
        lines.append(f"not run here (capability_missing): {', '.join(refused)}")
    mismatched = [r.label for r in ran if r.mismatched]
    overridden = [
        f"{r.label} (requested {r.requested_tokens}, applied {r.effective_tokens})"
        for r in ran
        if r.requested_tokens and r.effective_tokens not in (None, r.requested_tokens)
    ]
    if overridden:
        lines.append(f"the engine applied another draft length than asked: {', '.join(overridden)}")
    unrepeatable = sorted(
        {r.workload for r in rows if r.baseline_agreement.compared and not r.baseline_agreement.passed}
    )
    if unrepeatable:
        lines.append(f"the baseline's own greedy outputs differ between runs on: {', '.join(unrepeatable)}")
    quality = _quality(ran, mismatched, lines)
    lines.append(f"decision rule: {RULE}")
    ordered = sorted(pairs, key=lambda p: ("primary", "secondary", "control").index(p[0].role))
    headline = _headline(ordered)
    if not ordered:
        return Top("blocked", "precheck", "no speculative variant completed a paired run", None, headline, lines,
                   quality, mismatched, rows=tuple(rows))
    head, claim = ordered[0]
    if head.role == "control":
        return Top("inconclusive", claim.evidence_level, "only the negative control completed a paired run", None,
                   headline, lines, quality, mismatched, rows=tuple(rows))
    if head.capped and head.decision == "inconclusive (control failed)":
        lines.insert(0, f"{head.label} would adopt; capped at inconclusive: {head.capped}")
    # a reject needs paired or start-pooled evidence (the result contract); a primary whose outputs differ on
    # repeated evidence is never adopted and reads inconclusive, the mismatch named in the summary
    paired = claim.evidence_level in DECIDING
    decision = ("adopt" if head.decision == "adopt" else
                "reject" if head.decision.startswith("reject") and paired else "inconclusive")
    also = [f"{r.label} (Holm p {r.holm_p:.3g})" for r, _ in ordered[1:]
            if r.decision == "adopt" and r.role == "secondary"]
    if also:
        lines.append("secondary rows that also help after Holm's correction: " + ", ".join(also))
    e = claim.effect
    ident = head.agreement
    why = (f"float32 greedy outputs differ from speculation off's on {ident.compared - ident.identical} of "
           f"{ident.compared} requests: another computation, never adopted" if head.mismatched else claim.reason)
    summary = (
        f"{decision}: primary {head.label} E2E p50 x{e.value:.3f} [{e.ci_low:.3f}, {e.ci_high:.3f}] vs the "
        f"baseline ({why})" + "; " + "; ".join(lines[:3])
    )
    return Top(decision, claim.evidence_level, summary, e, headline, lines, quality, mismatched, rows=tuple(rows))
