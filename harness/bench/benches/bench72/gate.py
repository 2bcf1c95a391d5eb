"""The numerics gate for candidates that change numerics (dtype, quantization), against a fixed reference.

A faster dtype is worth nothing if it answers differently, and "differently" needs a fixed reference: the
highest-precision configuration served (float32 over bfloat16 over float16 over the engine's own choice;
unquantized over quantized; the first listed among equals), never whichever candidate happened to come first
(a bf16 reference once failed fp32, the more exact arithmetic, for disagreeing with the less exact). Every probe
of the schedule's lowest rate replays the same request list greedily (temperature 0); per request the gate asks
whether the candidate's output text equals the reference's exactly, and passes when the exact-match share is at
least ``min_exact_share``: the stated tolerance is the share of requests allowed to differ (1 − min_exact_share),
as MLPerf's accuracy runs state theirs against an fp32 reference (``harness.bench.lib.greedy``, which bench-68's
identity check shares). The mean prefix share (text matched before the first difference) is recorded beside it as
a description, not judged. A candidate that fails cannot be adopted or named as the tie's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.bench.lib.greedy import (  # noqa: F401  (the gate's public names: shared with bench-68's identity check)
    ALIASES,
    DTYPE_ORDER,
    agreement,
    numerics_of,
    precision_rank,
    prefix_share,
)

NUMERICS = ("dtype", "quantization")
REFERENCE_RULE = ("the highest-precision candidate served (float32 > bfloat16 > float16 > auto; unquantized > "
                  "quantized; the first listed among equals)")


def changes_numerics(settings: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    return numerics_of(settings) != numerics_of(base)


def reference_of(settings: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The reference candidate's name: the highest precision served, the first listed among equals."""
    names = list(settings)
    return min(names, key=lambda n: (precision_rank(settings[n]), names.index(n))) if names else None
