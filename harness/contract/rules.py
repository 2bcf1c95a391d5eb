"""Evidence rules that JSON Schema cannot express; checked after the schema passes.

Each rule has a name that appears in error messages and in ``audit`` output.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from harness.contract.problems import Problem

PERCENTILE_ORDER = ("min", "p50", "p90", "p95", "p99", "max")


def _distribution_order(group: dict[str, Any], pointer: str) -> list[Problem]:
    problems = []
    for name, dist in group.items():
        if not (name.endswith("_ms") and isinstance(dist, dict)):
            continue
        present = [(k, dist[k]) for k in PERCENTILE_ORDER if k in dist]
        for (ka, a), (kb, b) in pairwise(present):
            if a > b + 1e-9:
                problems.append(
                    Problem(f"{pointer}/{name}", "percentiles-ordered", f"{ka}={a} is greater than {kb}={b}")
                )
        if "min" in dist and "max" in dist and not dist["min"] - 1e-9 <= dist["mean"] <= dist["max"] + 1e-9:
            problems.append(
                Problem(f"{pointer}/{name}", "mean-within-range", f"mean={dist['mean']} outside [min, max]")
            )
    return problems


def _effect_rules(conclusion: dict[str, Any]) -> list[Problem]:
    effect = conclusion.get("effect")
    if not effect:
        return []
    problems = []
    lo, hi, value, zero = effect["ci_low"], effect["ci_high"], effect["value"], effect["no_effect"]
    if not lo <= hi:
        problems.append(Problem("/conclusion/effect", "ci-ordered", f"ci_low={lo} > ci_high={hi}"))
    if not lo - 1e-9 <= value <= hi + 1e-9:
        problems.append(Problem("/conclusion/effect", "estimate-inside-ci", f"value={value} outside [{lo}, {hi}]"))
    better_side = hi < zero if effect["better"] == "lower" else lo > zero
    worse_side = lo > zero if effect["better"] == "lower" else hi < zero
    decision = conclusion["decision"]
    if decision == "adopt" and not better_side:
        problems.append(
            Problem(
                "/conclusion/decision",
                "adopt-needs-ci-excluding-no-effect",
                f"adopt needs the {effect['confidence']:.0%} interval [{lo:.4g}, {hi:.4g}] to exclude "
                f"no-effect ({zero}) on the {effect['better']} side",
            )
        )
    if decision == "reject" and not worse_side:
        problems.append(
            Problem(
                "/conclusion/decision",
                "reject-needs-ci-excluding-no-effect",
                f"reject needs the interval [{lo:.4g}, {hi:.4g}] to exclude no-effect ({zero}) on the worse side",
            )
        )
    if not any(p.rule.endswith("excluding-no-effect") for p in problems):
        problems += _margin_rules(effect, decision)
    return problems


def _margin_rules(effect: dict[str, Any], decision: str) -> list[Problem]:
    """With a stated margin m, adopt/reject need the interval beyond the band [no_effect/(1+m), no_effect*(1+m)]."""
    margin = effect.get("margin")
    if margin is None or decision not in ("adopt", "reject"):
        return []
    zero, lo, hi = effect["no_effect"], effect["ci_low"], effect["ci_high"]
    low, high = zero / (1 + margin), zero * (1 + margin)
    lower = effect["better"] == "lower"
    beyond = (hi < low if lower else lo > high) if decision == "adopt" else (lo > high if lower else hi < low)
    if beyond:
        return []
    return [
        Problem(
            "/conclusion/decision",
            f"{decision}-needs-ci-beyond-margin",
            f"{decision} needs the interval [{lo:.4g}, {hi:.4g}] beyond the margin band "
            f"[{low:.4g}, {high:.4g}] (margin {margin:g})",
        )
    ]


def _termination_rules(doc: dict[str, Any]) -> list[Problem]:
    if doc["kind"] != "serving":
        return []
    counted = sum(doc["correctness"]["termination_counts"].values())
    expected = doc["workload"]["request_count"]
    if counted != expected:
        return [
            Problem(
                "/correctness/termination_counts",
                "every-request-accounted",
                f"termination counts sum to {counted}, the workload has {expected} requests",
            )
        ]
    return []


def check_result_rules(doc: dict[str, Any]) -> list[Problem]:
    problems = _distribution_order(doc["performance"], "/performance")
    problems += _effect_rules(doc["conclusion"])
    problems += _termination_rules(doc)
    for side in ("input_tokens", "output_tokens"):
        summary = doc["workload"][side]
        if not summary["min"] <= summary["mean"] <= summary["max"]:
            problems.append(Problem(f"/workload/{side}", "mean-within-range", "mean outside [min, max]"))
    return problems
