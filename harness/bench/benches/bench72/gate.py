"""The greedy-agreement gate for candidates that change numerics (dtype, quantization).

A faster dtype is worth nothing if it answers differently. Every probe of the schedule's lowest rate replays the
same request list greedily (temperature 0), so the base candidate's outputs are a reference for every other's:
per request, the share of the base's output text matched before the first difference; the gate passes when the
mean share reaches ``min_agreement``. A candidate that fails cannot be adopted or named as the tie's choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.client.records import RequestRecord

NUMERICS = ("dtype", "quantization")


def changes_numerics(settings: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    return any(settings.get(k) != base.get(k) for k in NUMERICS)


def prefix_share(reference: str, text: str) -> float:
    """Share of ``reference`` that ``text`` matches before their first difference (1.0 for two empty texts)."""
    if not reference:
        return 1.0 if not text else 0.0
    same = next((i for i, (a, b) in enumerate(zip(reference, text, strict=False)) if a != b),
                min(len(reference), len(text)))
    return same / len(reference)


def agreement(base: Sequence[RequestRecord], other: Sequence[RequestRecord], min_agreement: float
              ) -> dict[str, Any]:
    """The gate's figures over the requests both completed with text."""
    ref = {r.index: r.output_text for r in base if r.completed and r.output_text is not None}
    shares = [prefix_share(ref[r.index], r.output_text) for r in other
              if r.completed and r.output_text is not None and r.index in ref]
    if not shares:
        return {"requests": 0, "passed": False, "mean_prefix_share": None, "exact_share": None,
                "min_agreement": min_agreement, "reason": "no request has outputs from both"}
    mean = sum(shares) / len(shares)
    return {"requests": len(shares), "mean_prefix_share": round(mean, 4),
            "exact_share": round(sum(s == 1.0 for s in shares) / len(shares), 4), "min_agreement": min_agreement,
            "passed": mean >= min_agreement,
            "reason": f"mean greedy prefix agreement {mean:.1%} {'>=' if mean >= min_agreement else '<'} "
                      f"{min_agreement:.0%} over {len(shares)} requests"}
