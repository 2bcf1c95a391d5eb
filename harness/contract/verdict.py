"""The first lines of every summary a person reads: one writer for benches, ``infkit run``, mechanisms and CUDA
experiments (MLPerf LoadGen's order: the scenario and its headline, ``VALID``/``INVALID``, then each failed
constraint with what to do about it; statistics and tables come after).

A deciding run leads with its decision in capitals, its evidence level and validity, then the effect in words a
reader takes in at once (``TTFT p50 ×0.123 [0.114, 0.132], −88 %, lower is better``) with n, unit and margin; a
run that measures rather than decides (a curve, a capacity) leads with its figure instead. Requests a client stall
held follow, with what the decision reads with them put back. Each invalid or
undecided reason follows, one per line, with its recommendation. Lines are wrapped for a terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

WIDTH = 100
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl": "ITL", "e2e_wait": "E2E+wait"}


def metric_words(metric: str) -> str:
    """``ttft_ms.p50`` -> ``TTFT p50``; ``output_tokens_per_s`` -> ``output tokens/s``."""
    base, _, stat = metric.partition(".")
    base = base.removesuffix("_ms")
    name = METRIC_NAMES.get(base, base.replace("_per_", "/").replace("_", " "))
    return f"{name} {stat}".strip()


def effect_words(effect: Mapping[str, Any]) -> str:
    """A ratio as a reader takes it in: ``TTFT p50 ×0.123 [0.114, 0.132], −88 %, lower is better``, then its
    basis (n repeats, unit, margin)."""
    value, low, high = effect["value"], effect.get("ci_low"), effect.get("ci_high")
    change = (value - 1) * 100
    sign = "−" if change < 0 else "+"
    interval = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
    better = f", {effect['better']} is better" if effect.get("better") else ""
    basis = [f"{effect['confidence']:.0%} CI" if effect.get("confidence") and interval else "",
             f"n = {effect['n_pairs']} {effect.get('unit') or 'repeat'}s" if effect.get("n_pairs") else "",
             f"margin {effect['margin']:.0%}" if effect.get("margin") is not None else ""]
    arms = f"{effect['arm_b']} vs {effect['arm_a']}: " if effect.get("arm_a") and effect.get("arm_b") else ""
    shown = ", ".join(b for b in basis if b)
    return (f"{arms}{metric_words(effect['metric'])} ×{value:.3g}{interval}, {sign}{abs(change):.0f} %{better}"
            + (f" ({shown})" if shown else ""))


def control_words(control: Mapping[str, Any]) -> str:
    """A control's verdict: ``control cache-off: equivalent, ×0.999 [0.98, 1.02] (within ±5 %)``."""
    eff = control.get("effect") or {}
    figure = f", ×{eff['value']:.3g} [{eff['ci_low']:.3g}, {eff['ci_high']:.3g}]" if "value" in eff else ""
    margin = control.get("equivalence_margin")
    band = f" (equivalence margin ±{margin:.1%})" if margin is not None else ""
    return f"control {control.get('name', '?')}: {control.get('equivalence', 'not judged')}{figure}{band}"


def excluded_words(work: Mapping[str, Any]) -> str:
    """The requests a client stall held and what the claim reads with them put back: ``excluded: 1 request a
    client stall overlapped (...); on every request ADOPT ×0.43 [0.35, 0.52] too: the decision stands``."""
    first = f"excluded: {work['count']} request(s) a client stall held ({'; '.join(work['requests'][:2])}" + (
        f"; {work['count'] - 2} more)" if work["count"] > 2 else ")")
    if work.get("decision_all") is None:
        return f"{first}, left out of the figures it could move"
    eff = work.get("effect_all") or {}
    figure = f" ×{eff['value']:.3g} [{eff['ci_low']:.3g}, {eff['ci_high']:.3g}]" if "value" in eff else ""
    if work.get("agree"):
        return f"{first}; on every request {work['decision_all'].upper()}{figure} too: the decision stands"
    return (f"{first}; on every request {work['decision_all'].upper()}{figure}, on the kept ones "
            f"{work['decision_kept'].upper()}: capped at inconclusive, the decision rests on the exclusion")


def headline(title: str, conclusion: Mapping[str, Any], figure: str | None = None) -> str:
    """``bench-69 INF-PREFIX-CACHE: ADOPT (paired evidence, VALID)``; a run that measures rather than decides leads
    with its figure in the decision's place (``bench-66 INF-FLOAT-BASELINE: MEASURED saturation between ...``)
    unless it was blocked."""
    valid = "VALID" if conclusion.get("valid", True) else "INVALID"
    said = (f"MEASURED {figure}" if figure and conclusion["decision"] == "inconclusive"
            else conclusion["decision"].upper())
    return f"{title}: {said} ({conclusion['evidence_level']} evidence, {valid})"


def verdict_lines(title: str, conclusion: Mapping[str, Any], *, figure: str | None = None,
                  controls: Sequence[Mapping[str, Any]] = (), invalid: Sequence[str] = (),
                  recommendations: Sequence[str] = (), width: int = WIDTH) -> list[str]:
    """The summary's first lines: the decision, the effect (or ``figure`` for a run that measures), each control,
    then every invalid or undecided reason (the conclusion's, then each ``invalid`` run's) and a recommendation per
    failed constraint, wrapped to ``width``."""
    lines = _wrapped(headline(title, conclusion, figure), width, "", "  ")  # a measured figure may run long
    effect = conclusion.get("effect")
    measured = figure is not None and conclusion["decision"] == "inconclusive"
    said = None if measured else figure or (effect_words(effect) if effect else conclusion.get("summary"))
    if said:
        lines += _wrapped(said, width, "  ")
    for control in controls:
        lines += _wrapped(control_words(control), width, "  ")
    if conclusion.get("excluded_work"):
        lines += _wrapped(excluded_words(conclusion["excluded_work"]), width, "  ")
    failure = conclusion.get("failure")
    reasons = [f"failure: {failure['kind']}: {failure['message']}"] if failure else []
    reasons += [*(conclusion.get("invalid_reasons") or []), *(r for r in invalid if r not in reasons)]
    if reasons:
        lines.append("invalid or undecided:")
        for reason in reasons:
            lines += _wrapped(reason, width, "  - ", "    ")
    if recommendations:
        lines.append("recommendations:")
        for advice in recommendations:
            lines += _wrapped(advice, width, "  - ", "    ")
    lines += _wrapped(f"next step: {conclusion['next_step']}", width) if conclusion.get("next_step") else []
    return lines


def _wrapped(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    return textwrap.wrap(str(text), width=width, initial_indent=first,
                         subsequent_indent=rest if rest is not None else first or "  ", break_on_hyphens=False,
                         break_long_words=False) or [first.rstrip()]
