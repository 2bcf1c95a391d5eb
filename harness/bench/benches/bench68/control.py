"""bench-68's negative control: prompt lookup on natural text, where it has nothing to copy.

The ``natural`` workload (``harness.workload.natural``) asks for new prose and is served through
the chat API with end-of-sequence allowed, so a small model's repetition loops under ignore_eos
cannot manufacture acceptance. It runs on the n-gram arm proposing the most tokens (the one chance matches
reward most; the method is the same lookup at every K). Rule (stated in every result): for that arm, the control
holds when its acceptance on ``natural`` is at or below ``--control-max-acceptance`` and at or
below ``--control-max-copy-share`` of the same arm's acceptance on ``copy``, and its per-token
claim (TPOT p50) does not adopt (its finding, e.g. a material gain, is recorded beside it: prose
that echoes the question gives lookup some real matches). Where it does not hold, or was not
measured, every n-gram adopt is capped at inconclusive with the reason: the acceptance (or the
speedup) would come from the workload, not the method. Answers end at EOS, so lengths differ by
prompt; A and B run the same prompts, and under greedy decoding their outputs (and so their
lengths and terminations, recorded here) should agree request for request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from harness.bench.benches.bench68.table import Row
from harness.bench.records import ArmRun, completed_runs

WORKLOADS = ("copy",)  # every arm
CONTROL = "natural"  # the n-gram arms' negative control
CONTROL_CLIENT = {"api": "chat", "ignore_eos": False}  # the chat template ends an answer with EOS; max_tokens caps it
RULE = ("negative control (natural workload, EOS allowed, on the n-gram arm proposing most): acceptance <= "
        "{abs:.0%} and <= {share:.0%} of the same arm's copy acceptance, and its TPOT p50 claim does not adopt; "
        "otherwise (or unmeasured) every n-gram adopt is capped at inconclusive")


def lengths(runs: Sequence[ArmRun], label: str) -> dict[str, Any]:
    """An arm's terminations (stop: EOS, length: the cap) and generated tokens over its completed repeats."""
    records = [rec for run in completed_runs(runs, label) for rec in run.records]
    reported = [rec.completion_tokens for rec in records if rec.completed and rec.completion_tokens is not None]
    return {"terminations": dict(sorted(Counter(rec.status for rec in records).items())),
            "output_tokens": sum(reported) if reported else None, "requests": len(records)}


def _arm_check(row: Row, copy: Row | None, max_acceptance: float, max_share: float) -> dict[str, Any]:
    rate = row.acceptance.rate if row.acceptance else None
    copy_rate = copy.acceptance.rate if copy and copy.acceptance else None
    limit = min(max_acceptance, max_share * copy_rate) if copy_rate is not None else max_acceptance
    claim = row.tpot
    gain = claim is not None and claim.decision == "adopt"
    why = []
    if rate is None or claim is None:
        why.append("not measured (no acceptance or no completed pair)")
    if rate is not None and rate > limit:
        why.append(f"acceptance {rate:.0%} > {limit:.0%}" + (f" (copy {copy_rate:.0%})" if copy_rate is not None
                                                            else ""))
    if gain and claim is not None:
        why.append(f"its TPOT claim adopts (x{claim.effect.value:.2f})")
    return {"arm": row.arm, "acceptance": rate, "copy_acceptance": copy_rate, "limit": round(limit, 6),
            "tpot_effect": claim.to_dict() if claim else None, "tpot_finding": claim.finding if claim else None,
            "held": not why, "why": "; ".join(why)}


def negative_control(rows: Sequence[Row], max_acceptance: float, max_share: float,
                     runs: Sequence[ArmRun] = ()) -> dict[str, Any]:
    """The control read per n-gram arm (acceptance, its claim, like-for-like lengths), and whether it held."""
    copy = {r.arm: r for r in rows if r.workload == "copy"}
    checks = []
    for r in rows:
        if r.workload != CONTROL or r.refused is not None:
            continue
        check = _arm_check(r, copy.get(r.arm), max_acceptance, max_share)
        base, spec = f"{CONTROL}/off@{r.arm}", f"{CONTROL}/{r.arm}"
        check["like_for_like"] = {"same_prompts": "both arms replay the one natural workload file",
                                  "greedy_agreement": r.agreement.to_dict(),
                                  "baseline": lengths(runs, base), "variant": lengths(runs, spec)}
        checks.append(check)
    held = bool(checks) and all(c["held"] for c in checks)
    failed = [f"{c['arm']}: {c['why']}" for c in checks if not c["held"]]
    if not checks:
        text = "negative control (natural workload): not measured (no n-gram arm ran it): n-gram adopts are capped"
    elif held:
        text = "negative control (natural workload, EOS allowed): holds: " + ", ".join(
            f"{c['arm']} acceptance {c['acceptance']:.0%} <= {c['limit']:.0%} (TPOT {c['tpot_finding']})"
            for c in checks)
    else:
        text = f"negative control (natural workload, EOS allowed) fails: {'; '.join(failed)}: n-gram adopts capped"
    return {"workload": CONTROL, "rule": RULE.format(abs=max_acceptance, share=max_share),
            "max_acceptance": max_acceptance, "max_copy_share": max_share, "arms": checks, "passed": held,
            "text": text}


def cap_ngram(rows: Sequence[Row], control: dict[str, Any], ngram_arms: Sequence[str]) -> list[Row]:
    """The rows with every n-gram row's adopt capped where the control did not hold (the reason on the row)."""
    if control["passed"]:
        return list(rows)
    failed = "; ".join(f"{c['arm']}: {c['why']}" for c in control["arms"] if not c["held"]) or "not measured"
    reason = f"the negative control did not hold ({failed}): the gain may come from the workload, not the method"
    return [replace(r, capped=reason) if r.arm in ngram_arms and r.workload != CONTROL else r for r in rows]
