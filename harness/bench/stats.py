"""Paired-effect statistics and the decision rules for A/B serving comparisons (docs/measurement.md, Statistics).

The unit is the repeat (an interleaved round on one server start, or one start of an
alternating pair). For each repeat r, ``ratio_r = stat(B_r) / stat(A_r)`` (``stat``: the
metric's statistic over the run's requests, or the run's own figure); the estimate is the
geometric mean of the per-repeat ratios and its interval is Student's t on the per-repeat
log ratios with n − 1 degrees of freedom, whose coverage ``benchmarks/coverage.py``
checks by simulation. Beside it: the exact sign-flip p (no distribution assumed) and a
request-level interval from resampling request indices jointly in A and B (the same
index is the same prompt), stratified by design cell; with one repeat that is the only
interval and the evidence is ``single``.

Decision (stated once, here), with a margin m (smallest effect worth acting on, as a
ratio band ``[1/(1+m), 1+m]`` around no effect):
  * adopt        — the interval lies entirely beyond the margin on the wanted side,
  * reject       — it lies entirely beyond the margin on the other side,
  * inconclusive — anything else; "no material effect" when it lies inside the band.
adopt/reject need ``paired`` evidence (``MIN_PAIRED_REPEATS`` repeats interleaved on one start or on alternating
restarts) or ``start-pooled``: across starts, with the host's pooled start-to-start variance in the interval
(``startcontrol.with_start_variance``). A cross-start contrast without one is ``repeated``; fewer repeats are
``single``; ``repeated`` and ``single`` cap the decision at inconclusive, with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from harness.contract.distribution import binomial_upper  # noqa: F401  (re-exported: SLO bounds live there)
from harness.errors import InvalidInput

MIN_PAIRED_REPEATS = 5
DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
NO_EFFECT_RATIO = 1.0
DEFAULT_MARGIN = 0.05  # a 5 % change: below it a serving setting is not worth switching
CONTROL_SHARE = 0.2  # a control shift worth 20 % of the claim's log effect could explain a material share
SIGN_FLIP_EXACT_MAX = 16  # repeats up to which the sign-flip p enumerates every flip

Design = Literal["interleaved", "alternating", "cross-start", "cross-start-pooled"]
Level = Literal["single", "repeated", "start-pooled", "paired"]
DECIDING: tuple[str, ...] = ("paired", "start-pooled")  # the evidence levels that may adopt or reject
Better = Literal["lower", "higher"]
Statistic = Callable[..., float]


@dataclass(frozen=True)
class RepeatSamples:
    """One repeat's per-request values of both arms, by request index (ITL: several values per request)."""

    a: Mapping[int, tuple[float, ...]]
    b: Mapping[int, tuple[float, ...]]
    strata: Mapping[int, Hashable] = field(default_factory=dict)  # request index → design cell (hit/miss, class)

    @classmethod
    def of_lists(cls, a: Sequence[float], b: Sequence[float]) -> RepeatSamples:
        """Position-keyed: position i of A and of B are the same request when the lists are equally long."""
        return cls({i: (float(v),) for i, v in enumerate(a)}, {i: (float(v),) for i, v in enumerate(b)})

    @property
    def joint(self) -> bool:
        return set(self.a) == set(self.b)

    def values(self, arm: Literal["a", "b"]) -> np.ndarray:
        side = self.a if arm == "a" else self.b
        return np.asarray([v for k in sorted(side) for v in side[k]], dtype=float)

    @property
    def n_requests(self) -> int:
        return min(len(self.a), len(self.b))


@dataclass(frozen=True)
class PairedEffect:
    """Effect of B over A: estimate, interval, and what produced it."""

    value: float
    ci_low: float
    ci_high: float
    per_repeat: tuple[float, ...]
    confidence: float
    statistic: str = "median"
    unit: Literal["repeat", "request"] = "repeat"
    n_requests: int | None = None  # fewest requests of an arm in any repeat (per-request metrics)
    p_sign: float | None = None  # exact one-sided sign-flip p toward the side the estimate lies on
    log_mean: float = 0.0
    log_se: float | None = None
    request_ci: tuple[float, float] | None = None  # joint request bootstrap, conditional on these repeats
    resamples: int = 0
    seed: int = 0
    request_design: str = "joint"
    start_var_log: float = 0.0  # pooled start-to-start variance of a log figure in the interval (cross-start)
    t_df: float | None = None  # Welch–Satterthwaite df when ``start_var_log`` is in the interval

    @property
    def n_pairs(self) -> int:
        return len(self.per_repeat)

    @property
    def df(self) -> float:
        return self.t_df if self.t_df is not None else self.n_pairs - 1

    @property
    def method(self) -> str:
        est = f"geometric mean over repeats of {self.statistic}(B)/{self.statistic}(A)"
        if self.unit == "request":
            return (f"one repeat: {self.request_design} request bootstrap ({self.resamples} resamples, seed "
                    f"{self.seed}), percentile interval; {est}")
        if self.t_df is not None:
            return (f"Student t on per-repeat log ratios plus the pooled start-to-start variance (se² = s²/n + "
                    f"2·σ²_start, σ_start {math.sqrt(self.start_var_log):.4f} on the log scale), "
                    f"Welch–Satterthwaite {self.t_df:.1f} df, unit = repeat; {est}")
        return f"Student t on per-repeat log ratios, {self.df} df, unit = repeat; {est}"


@dataclass(frozen=True)
class Verdict:
    evidence_level: Level
    decision: Literal["adopt", "reject", "inconclusive"]
    reason: str
    finding: Literal["material gain", "material loss", "no material effect", "undetermined"] = "undetermined"


# ---- distributions without scipy ---------------------------------------------------------------------------------

def t_cdf(x: float, df: float) -> float:
    """Student's t CDF (Simpson's rule on the density; accurate to ~1e-9 for |x| < 100)."""
    if df < 1:
        raise ValueError("t needs at least 1 degree of freedom")
    if x == 0:
        return 0.5
    u = np.linspace(0.0, abs(x), 4001)
    const = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    pdf = const * (1 + u * u / df) ** (-(df + 1) / 2)
    h = u[1] - u[0]
    area = h / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())
    return 0.5 + math.copysign(min(float(area), 0.5), x)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t by bisection on ``t_cdf``."""
    if not 0 < p < 1:
        raise ValueError("p must lie in (0, 1)")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def sign_flip_p(logs: Sequence[float], *, seed: int = 0) -> float:
    """Exact one-sided sign-flip p of the mean log ratio against 0, toward the side the mean lies on."""
    x = np.asarray(logs, dtype=float)
    observed = abs(float(x.mean()))
    if x.size <= SIGN_FLIP_EXACT_MAX:
        signs = np.asarray(list(itertools.product((1.0, -1.0), repeat=x.size)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(65_536, x.size))
    means = (signs * x).mean(axis=1)
    tol = 1e-12 * max(1.0, observed)
    hits = means <= -observed + tol if x.mean() < 0 else means >= observed - tol
    return float(hits.mean())


# ---- intervals ---------------------------------------------------------------------------------------------------

def _apply(statistic: Statistic, rows: np.ndarray) -> np.ndarray:
    """``statistic`` over each row; vectorised when it takes ``axis``."""
    try:
        return np.asarray(statistic(rows, axis=1), dtype=float)
    except TypeError:
        return np.asarray([statistic(r) for r in rows], dtype=float)


def _draw_indices(keys: np.ndarray, strata: Mapping[int, Hashable], rng: np.random.Generator, resamples: int,
                  block: int) -> np.ndarray:
    """Request indices per resample: with replacement, within each stratum, in moving blocks of ``block``."""
    cells: dict[Hashable, list[int]] = {}
    for k in keys:
        cells.setdefault(strata.get(int(k)), []).append(int(k))
    parts = []
    for members in cells.values():
        arr = np.asarray(members)
        length = min(max(1, block), arr.size)
        starts = rng.integers(0, arr.size - length + 1, size=(resamples, math.ceil(arr.size / length)))
        picks = (starts[:, :, None] + np.arange(length)).reshape(resamples, -1)[:, :arr.size]
        parts.append(arr[picks])
    return np.concatenate(parts, axis=1)


def _repeat_log_draws(rep: RepeatSamples, statistic: Statistic, rng: np.random.Generator, resamples: int,
                      block: int) -> np.ndarray:
    """Resampled log(stat(B)/stat(A)) of one repeat: joint in A and B when both hold the same requests."""
    def stat_of(side: Mapping[int, tuple[float, ...]], picks: np.ndarray) -> np.ndarray:
        if all(len(v) == 1 for v in side.values()):
            keys = np.asarray(sorted(side))
            values = np.asarray([side[int(k)][0] for k in keys], dtype=float)
            return _apply(statistic, values[np.searchsorted(keys, picks)])
        return np.asarray([statistic(np.asarray([x for k in row for x in side[int(k)]])) for row in picks])

    if rep.joint:
        picks = _draw_indices(np.asarray(sorted(rep.a)), rep.strata, rng, resamples, block)
        a, b = stat_of(rep.a, picks), stat_of(rep.b, picks)
    else:
        a = stat_of(rep.a, _draw_indices(np.asarray(sorted(rep.a)), rep.strata, rng, resamples, block))
        b = stat_of(rep.b, _draw_indices(np.asarray(sorted(rep.b)), rep.strata, rng, resamples, block))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.log(np.maximum(b, 1e-300)) - np.log(np.maximum(a, 1e-300)), -690.0, 690.0)


def t_interval(logs: np.ndarray, confidence: float) -> tuple[float, float, float | None]:
    """(low, high, standard error) of the mean log ratio; the point itself with one repeat."""
    mean = float(logs.mean())
    if logs.size < 2:
        return mean, mean, None
    se = float(logs.std(ddof=1)) / math.sqrt(logs.size)
    half = t_quantile(1 - (1 - confidence) / 2, logs.size - 1) * se
    return mean - half, mean + half, se


def _effect(logs: np.ndarray, confidence: float, **kw: object) -> PairedEffect:
    lo, hi, se = t_interval(logs, confidence)
    mean = float(logs.mean())
    return PairedEffect(value=math.exp(mean), ci_low=math.exp(lo), ci_high=math.exp(hi),
                        per_repeat=tuple(float(math.exp(x)) for x in logs), confidence=confidence, log_mean=mean,
                        log_se=se, p_sign=sign_flip_p(logs) if logs.size > 1 else None, **kw)  # type: ignore[arg-type]


def paired_ratio_effect(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]] | RepeatSamples],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    statistic: Statistic = np.median,
    block: int = 1,
) -> PairedEffect:
    """Effect of B over A from per-repeat request samples (``RepeatSamples``, or ``(a_values, b_values)`` lists)."""
    if not pairs:
        raise InvalidInput("no completed A/B pairs to compare")
    reps = [p if isinstance(p, RepeatSamples) else RepeatSamples.of_lists(*p) for p in pairs]
    logs = []
    for i, rep in enumerate(reps):
        a, b = rep.values("a"), rep.values("b")
        if a.size == 0 or b.size == 0:
            raise InvalidInput(f"repeat {i + 1} has an arm without completed requests")
        sa, sb = float(statistic(a)), float(statistic(b))
        if sa <= 0 or sb <= 0:
            raise InvalidInput(f"repeat {i + 1}: the statistic must be positive in both arms for a ratio")
        logs.append(math.log(sb / sa))
    design = ("joint" if all(r.joint for r in reps) else "unpaired") + (
        ", stratified" if any(r.strata for r in reps) else "") + (f", blocks of {block}" if block > 1 else "")
    eff = _effect(np.asarray(logs), confidence, statistic=getattr(statistic, "__name__", "statistic"),
                  n_requests=min(r.n_requests for r in reps), resamples=resamples, seed=seed, request_design=design)
    if resamples <= 0 and len(reps) > 1:  # the repeat-level interval alone (simulations)
        return eff
    rng = np.random.default_rng(seed)
    draws = np.mean([_repeat_log_draws(r, statistic, rng, max(resamples, 1), block) for r in reps], axis=0)
    alpha = (1 - confidence) / 2
    req_lo, req_hi = (float(math.exp(q)) for q in np.quantile(draws, [alpha, 1 - alpha]))
    request_ci = (min(req_lo, eff.value), max(req_hi, eff.value))
    if len(reps) == 1:  # no repeat-level spread to use: the request level is all there is
        return _replace(eff, ci_low=request_ci[0], ci_high=request_ci[1], unit="request", request_ci=request_ci)
    return _replace(eff, request_ci=request_ci)


def _replace(eff: PairedEffect, **changes: object) -> PairedEffect:
    return dataclasses.replace(eff, **changes)  # type: ignore[arg-type]


def repeat_ratio_effect(
    pairs: Sequence[tuple[float, float]],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    name: str = "value",
) -> PairedEffect:
    """Effect of B over A from one value per arm run ``[(a, b), ...]``: t on the per-repeat log ratios."""
    if not pairs:
        raise InvalidInput("no completed A/B pairs to compare")
    if any(a <= 0 or b <= 0 for a, b in pairs):
        raise InvalidInput(f"{name} must be positive in both arms for a ratio")
    logs = np.log(np.asarray([b / a for a, b in pairs], dtype=float))
    return _effect(logs, confidence, statistic=name, resamples=0, seed=seed)


# ---- decisions ---------------------------------------------------------------------------------------------------

def band(margin: float) -> tuple[float, float]:
    """The ratios that are no material effect: ``[1/(1+m), 1+m]``, symmetric on the log scale."""
    return 1.0 / (1.0 + margin), 1.0 + margin


def finding(effect: PairedEffect, *, better: Better, margin: float) -> str:
    low, high = band(margin)
    lo, hi = effect.ci_low, effect.ci_high
    gain = hi < low if better == "lower" else lo > high
    loss = lo > high if better == "lower" else hi < low
    if gain:
        return "material gain"
    if loss:
        return "material loss"
    return "no material effect" if low <= lo and hi <= high else "undetermined"


CROSS_START: tuple[Design, ...] = ("cross-start", "cross-start-pooled")  # one start per arm


def evidence(n_pairs: int, design: Design, min_repeats: int = MIN_PAIRED_REPEATS) -> Level:
    """``paired`` (one start or alternating restarts) and ``start-pooled`` (across starts, the pooled start variance
    in the interval) from ``min_repeats`` repeats; a cross-start contrast without it ``repeated``; else ``single``."""
    if n_pairs < min_repeats:
        return "repeated" if design in CROSS_START and n_pairs >= 3 else "single"
    return {"cross-start": "repeated", "cross-start-pooled": "start-pooled"}.get(design, "paired")  # type: ignore


def decide(effect: PairedEffect, *, better: Better = "lower", margin: float = DEFAULT_MARGIN,
           min_repeats: int = MIN_PAIRED_REPEATS, design: Design = "interleaved", refuse: str = "") -> Verdict:
    """Apply the stated decision rules to ``effect``; ``refuse`` names a reason it may not adopt (e.g. max of n)."""
    low, high = band(margin)
    found = finding(effect, better=better, margin=margin)
    interval = f"{effect.confidence:.0%} CI [{effect.ci_low:.3f}, {effect.ci_high:.3f}]"
    margin_text = f"the margin band [{low:.3f}, {high:.3f}] (margin {margin:.1%})"
    why = {"material gain": f"{interval} lies beyond {margin_text} on the {better} side",
           "material loss": f"{interval} lies beyond {margin_text} on the wrong side",
           "no material effect": f"{interval} lies inside {margin_text}: no material effect",
           "undetermined": f"{interval} overlaps {margin_text}"}[found]
    decision = {"material gain": "adopt", "material loss": "reject"}.get(found, "inconclusive")
    level = evidence(effect.n_pairs, design, min_repeats)
    caps = []
    if level == "single":
        caps.append(f"only {effect.n_pairs} repeat(s) (< {min_repeats}), so evidence is single")
    elif level == "repeated" and design == "cross-start":
        caps.append("the arms ran on different server starts (not interleaved or alternating restarts) and no "
                    "start-to-start variance is in the interval (make bench-00 on this host), so evidence is repeated")
    elif level == "repeated":
        caps.append(f"only {effect.n_pairs} repeats (< {min_repeats}), so evidence is repeated")
    if refuse:
        caps.append(refuse)
    if caps and decision != "inconclusive":
        why += "; " + "; ".join(caps) + " and the decision is capped at inconclusive"
        decision = "inconclusive"
    elif caps:
        why += "; " + "; ".join(caps)
    return Verdict(level, decision, why, found)  # type: ignore[arg-type]


def p_beyond(effect: PairedEffect, *, better: Better, margin: float) -> float:
    """One-sided t p of 'the effect is not beyond the margin on the better side' (1.0 without a spread)."""
    if effect.log_se is None or effect.log_se == 0:
        beyond = finding(effect, better=better, margin=margin) == "material gain"
        return 0.0 if beyond else 1.0
    threshold = -math.log1p(margin) if better == "lower" else math.log1p(margin)
    t = (effect.log_mean - threshold) / effect.log_se  # a start-pooled effect's se and df hold the start variance
    return t_cdf(t, effect.df) if better == "lower" else 1 - t_cdf(t, effect.df)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def control_margin(claim_value: float | None, stated: float, share: float = CONTROL_SHARE) -> float:
    """A control's equivalence margin: the stated one, or ``share`` of the claim's log effect when that is larger."""
    if claim_value is None or claim_value <= 0:
        return stated
    return max(stated, math.exp(share * abs(math.log(claim_value))) - 1.0)


def equivalent(effect: PairedEffect, margin: float) -> bool:
    """TOST at the interval's level: the whole interval inside the band ``[1/(1+m), 1+m]``."""
    low, high = band(margin)
    return low <= effect.ci_low and effect.ci_high <= high


def min_requests(statistic: str) -> int:
    """Requests a percentile needs before it is more than the sample maximum: ceil(1/(1-q)) (P99: 100, P95: 20)."""
    if statistic.startswith("p") and statistic[1:].replace(".", "", 1).isdigit():
        q = min(float(statistic[1:]) / 100, 0.999)
        return math.ceil(1 / (1 - q) - 1e-9)
    return 1
