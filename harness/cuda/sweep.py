"""Pure analysis of a batch x context sweep: skip rule, OOM boundary, inflection point.

No torch here: cells are plain records, so the boundary logic is tested with
hand-made cells. Memory use is assumed monotone in batch and in context: a
cell that ran out of memory implies every cell with at least its batch and at
least its context would too, so those are skipped, not attempted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Inflection: the first batch where decode step time grows at least this fast
# relative to batch (d log t / d log b): below it, adding sequences is nearly
# free (memory-bound); above it, each sequence costs compute.
INFLECTION_ELASTICITY = 0.5


@dataclass(frozen=True)
class Cell:
    batch: int
    context: int
    status: str  # ok | oom | skipped
    step_p50_ms: float | None = None

    @property
    def tokens(self) -> int:
        return self.batch * self.context


def dominated_by_oom(batch: int, context: int, cells: list[Cell]) -> Cell | None:
    """The OOM cell that makes (batch, context) certain to run out of memory too, if any."""
    for c in cells:
        if c.status == "oom" and batch >= c.batch and context >= c.context:
            return c
    return None


def boundary(cells: list[Cell]) -> dict[str, Any]:
    """Largest context that ran per batch, the OOM cells, and the largest batch x context that fit.

    Among cells with equally many tokens the larger batch counts as the larger cell.
    """
    ok = [c for c in cells if c.status == "ok"]
    per_batch: dict[str, int | None] = {}
    for b in sorted({c.batch for c in cells}):
        fitting = [c.context for c in ok if c.batch == b]
        per_batch[str(b)] = max(fitting) if fitting else None
    best = max(ok, key=lambda c: (c.tokens, c.batch), default=None)
    return {
        "max_context_per_batch": per_batch,
        "oom_cells": [{"batch": c.batch, "context": c.context} for c in cells if c.status == "oom"],
        "largest_fitting": {"batch": best.batch, "context": best.context, "tokens": best.tokens} if best else None,
        "oom_seen": any(c.status == "oom" for c in cells),
    }


def inflection(cells: list[Cell], elasticity: float = INFLECTION_ELASTICITY) -> dict[str, Any]:
    """Per context, the first batch where step time grows with elasticity >= ``elasticity``.

    Elasticity between neighbouring batches b1 < b2 is log(t2/t1) / log(b2/b1):
    0 when a bigger batch costs nothing extra, 1 when time grows in proportion.
    """
    per_context: dict[str, Any] = {}
    for ctx in sorted({c.context for c in cells}):
        row = sorted(
            (c for c in cells if c.context == ctx and c.status == "ok" and c.step_p50_ms), key=lambda c: c.batch
        )
        found = None
        slopes = []
        for a, b in zip(row, row[1:], strict=False):
            e = math.log(b.step_p50_ms / a.step_p50_ms) / math.log(b.batch / a.batch)
            slopes.append({"from_batch": a.batch, "to_batch": b.batch, "elasticity": e})
            if found is None and e >= elasticity:
                found = b.batch
        per_context[str(ctx)] = {
            "inflection_batch": found,
            "elasticities": slopes,
            "monotone": all(s["elasticity"] >= 0 for s in slopes),
        }
    found_batches = [v["inflection_batch"] for v in per_context.values() if v["inflection_batch"] is not None]
    return {
        "rule": f"first batch where d log(step time) / d log(batch) >= {elasticity}",
        "per_context": per_context,
        "inflection_batch": min(found_batches) if found_batches else None,
        # A bigger batch that stepped faster means timing noise dominates: the knee is not trustworthy.
        "monotone": all(v["monotone"] for v in per_context.values()),
    }
