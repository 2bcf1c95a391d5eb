"""The schema's ``distribution_ms`` object, computed one way for every result.

Percentiles: linear interpolation between closest ranks (Hyndman & Fan type 7,
numpy's default), recorded in results as ``percentile_method: "linear"``.
``std`` is the population standard deviation (ddof = 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

PERCENTILE_METHOD = "linear"
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
