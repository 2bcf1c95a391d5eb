"""The schema's ``distribution_ms`` object, computed one way for every result.

Percentiles: linear interpolation between closest ranks (Hyndman & Fan type 7,
numpy's default), recorded in results as ``percentile_method: "linear"``.
``std`` is the population standard deviation (ddof = 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

PERCENTILE_METHOD: Final = "linear"  # Final: typed as the literal numpy's ``method`` accepts
DECIMALS = 6


def distribution_ms(values_ms: Sequence[float], decimals: int = DECIMALS) -> dict[str, Any] | None:
    """n, mean, std, min, p50, p90, p95, p99, max of a sample in ms, rounded; None for no values."""
    if len(values_ms) == 0:
        return None
    a = np.asarray(values_ms, dtype=float)
    p50, p90, p95, p99 = np.percentile(a, [50, 90, 95, 99], method=PERCENTILE_METHOD)
    out = {"mean": a.mean(), "std": a.std(), "min": a.min(), "p50": p50, "p90": p90, "p95": p95, "p99": p99,
           "max": a.max()}
    return {"n": int(a.size), **{k: round(float(v), decimals) for k, v in out.items()}}


def token_summary(values: Sequence[int]) -> dict[str, Any]:
    """The schema's token-count summary (min, max, mean, total); zeros for no values."""
    if len(values) == 0:
        return {"min": 0, "max": 0, "mean": 0.0, "total": 0}
    total = int(sum(values))
    return {"min": int(min(values)), "max": int(max(values)), "mean": round(total / len(values), DECIMALS),
            "total": total}


def binomial_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper–Pearson upper bound on a rate after ``k`` events in ``n`` trials (bisection on the CDF)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError("need 0 <= k <= n and n > 0")
    if k == n:
        return 1.0
    alpha = 1 - confidence

    def cdf(p: float) -> float:  # P(X <= k | p)
        return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                            + (i * math.log(p) if i else 0.0) + (n - i) * math.log1p(-p)) for i in range(k + 1))
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > alpha else (lo, mid)
    return hi


def slo_compliance(met: Sequence[bool], confidence: float = 0.95, min_requests: int = 100) -> dict[str, object]:
    """SLO compliance as an exceedance count with its binomial upper bound (MLPerf LoadGen's early-stopping idea);
    below ``min_requests`` a P99-style verdict is not given."""
    n, exceeded = len(met), sum(1 for ok in met if not ok)
    return {"requests": n, "exceeded": exceeded, "exceedance": round(exceeded / n, DECIMALS) if n else None,
            "exceedance_upper": round(binomial_upper(exceeded, n, confidence), DECIMALS) if n else None,
            "confidence": confidence, "verdict_allowed": n >= min_requests,
            "basis": "latency from the scheduled send"}
