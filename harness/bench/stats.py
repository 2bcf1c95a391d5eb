"""Paired-effect statistics and the decision rules for A/B serving comparisons.

Effect of arm B relative to arm A on a metric: for each interleaved repeat r,
``ratio_r = stat(B_r) / stat(A_r)`` (``stat`` is the metric's statistic over the
requests of the run: median, P99, …); the estimate is the geometric mean of the
per-repeat ratios. Its interval comes from a seeded two-level bootstrap:
resample the repeats (pairs) with replacement and, within each drawn pair,
resample each arm's requests with replacement; percentile interval. The request
level keeps the interval honest when repeats are few. A metric that exists only
per run (throughput, hit rate) has one value per arm run: its interval resamples
the repeats alone (``repeat_ratio_effect``), which is wide with few repeats.

Decision (stated once, here):
  * adopt        — the interval lies entirely on the wanted side of no-effect (1.0),
  * reject       — it lies entirely on the other side,
  * inconclusive — it contains no-effect;
  adopt/reject need ``MIN_PAIRED_REPEATS`` interleaved repeats; with fewer the
  evidence level drops to ``single`` and the decision is capped at inconclusive,
  with the reason written in the summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.errors import InvalidInput

MIN_PAIRED_REPEATS = 3
DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
NO_EFFECT_RATIO = 1.0


@dataclass(frozen=True)
class PairedEffect:
    """Ratio-of-medians effect of B over A with its bootstrap interval."""

    value: float
    ci_low: float
    ci_high: float
    per_repeat: tuple[float, ...]
    confidence: float
    resamples: int
    seed: int
    statistic: str = "median"
    levels: str = "repeats, then requests within each arm"

    @property
    def n_pairs(self) -> int:
        return len(self.per_repeat)

    @property
    def method(self) -> str:
        return (f"paired bootstrap ({self.levels}), {self.resamples} resamples, seed {self.seed}, percentile "
                f"interval; estimate = geometric mean over repeats of {self.statistic}(B)/{self.statistic}(A)")


@dataclass(frozen=True)
class Verdict:
    evidence_level: Literal["single", "paired"]
    decision: Literal["adopt", "reject", "inconclusive"]
    reason: str


Statistic = Callable[[np.ndarray], float]


def paired_ratio_effect(
    pairs: list[tuple[list[float], list[float]]],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    statistic: Statistic = np.median,
) -> PairedEffect:
    """Effect of B over A from per-repeat samples ``[(a_values, b_values), ...]``."""
    def ratio(a: np.ndarray, b: np.ndarray) -> float:
        den = statistic(a)  # a resample can draw only zeros (e.g. sub-resolution times): an unbounded ratio
        return float(statistic(b) / den) if den > 0 else math.inf

    if not pairs:
        raise InvalidInput("no completed A/B pairs to compare")
    arrays = []
    for i, (a, b) in enumerate(pairs):
        a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if a_arr.size == 0 or b_arr.size == 0:
            raise InvalidInput(f"repeat {i + 1} has an arm without completed requests")
        if statistic(a_arr) <= 0 or statistic(b_arr) <= 0:
            raise InvalidInput(f"repeat {i + 1}: the statistic must be positive in both arms for a ratio")
        arrays.append((a_arr, b_arr))
    per_repeat = tuple(ratio(a, b) for a, b in arrays)
    value = math.exp(float(np.mean(np.log(per_repeat))))

    rng = np.random.default_rng(seed)
    n = len(arrays)
    log_means = np.empty(resamples)
    for k in range(resamples):
        picks = rng.integers(0, n, size=n)
        logs = 0.0
        for j in picks:
            a, b = arrays[j]
            a_s = a[rng.integers(0, a.size, size=a.size)]
            b_s = b[rng.integers(0, b.size, size=b.size)]
            logs += math.log(min(max(ratio(a_s, b_s), 1e-300), 1e300))  # finite, so the interval stays a number
        log_means[k] = logs / n
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.exp(np.quantile(log_means, [alpha, 1.0 - alpha]))
    # A percentile interval need not contain the plug-in estimate on tiny samples;
    # widening to include it is conservative (it can only make a claim harder).
    lo, hi = min(float(lo), value), max(float(hi), value)
    return PairedEffect(value=value, ci_low=lo, ci_high=hi, per_repeat=per_repeat, confidence=confidence,
                        resamples=resamples, seed=seed, statistic=getattr(statistic, "__name__", "statistic"))


def repeat_ratio_effect(
    pairs: list[tuple[float, float]],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    name: str = "value",
) -> PairedEffect:
    """Effect of B over A from one value per arm run ``[(a, b), ...]``: the repeats are resampled, nothing else."""
    if not pairs:
        raise InvalidInput("no completed A/B pairs to compare")
    if any(a <= 0 or b <= 0 for a, b in pairs):
        raise InvalidInput(f"{name} must be positive in both arms for a ratio")
    logs = np.log(np.asarray([b / a for a, b in pairs], dtype=float))
    value = math.exp(float(logs.mean()))
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, logs.size, size=(resamples, logs.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.exp(np.quantile(means, [alpha, 1.0 - alpha]))
    return PairedEffect(value=value, ci_low=min(float(lo), value), ci_high=max(float(hi), value),
                        per_repeat=tuple(float(math.exp(x)) for x in logs), confidence=confidence,
                        resamples=resamples, seed=seed, statistic=name, levels="repeats only: one value per arm run")


def decide(effect: PairedEffect, *, better: Literal["lower", "higher"] = "lower",
           no_effect: float = NO_EFFECT_RATIO, min_repeats: int = MIN_PAIRED_REPEATS) -> Verdict:
    """Apply the stated decision rules to ``effect``."""
    lo, hi = effect.ci_low, effect.ci_high
    better_side = hi < no_effect if better == "lower" else lo > no_effect
    worse_side = lo > no_effect if better == "lower" else hi < no_effect
    interval = f"{effect.confidence:.0%} CI [{lo:.3f}, {hi:.3f}]"
    if better_side:
        decision, why = "adopt", f"{interval} excludes {no_effect:g} on the {better} side"
    elif worse_side:
        decision, why = "reject", f"{interval} excludes {no_effect:g} on the wrong side"
    else:
        decision, why = "inconclusive", f"{interval} contains {no_effect:g}"
    if effect.n_pairs < min_repeats:
        capped = "inconclusive"
        return Verdict("single", capped, f"{why}; only {effect.n_pairs} interleaved repeat(s) (< {min_repeats}), "
                                         f"so evidence is single and the decision is capped at {capped}")
    return Verdict("paired", decision, why)
