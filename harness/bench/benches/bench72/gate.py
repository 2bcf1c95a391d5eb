"""The numerics gate for candidates that change numerics (dtype, quantization), against a fixed reference.

A faster dtype is worth nothing if it answers differently, and "differently" needs a fixed reference: the
highest-precision configuration served (float32 over bfloat16 over float16 over the engine's own choice;
unquantized over quantized; the first listed among equals), never whichever candidate happened to come first
(a bf16 reference once failed fp32, the more exact arithmetic, for disagreeing with the less exact). Every probe
of the schedule's lowest rate replays the same request list greedily (temperature 0); per request the gate asks
whether the candidate's output text equals the reference's exactly, and passes when the exact-match share is at
least ``min_exact_share``: the stated tolerance is the share of requests allowed to differ (1 − min_exact_share),
as MLPerf's accuracy runs state theirs against an fp32 reference. The mean prefix share (text matched before the
first difference) is recorded beside it as a description, not judged. A candidate that fails cannot be adopted
or named as the tie's choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.client.records import RequestRecord

NUMERICS = ("dtype", "quantization")
# Precision order of the served dtype, most exact first ("auto" is the engine's own choice: unknown, so last).
DTYPE_ORDER = ("float32", "bfloat16", "float16", "auto")
ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
REFERENCE_RULE = ("the highest-precision candidate served (float32 > bfloat16 > float16 > auto; unquantized > "
                  "quantized; the first listed among equals)")


def numerics_of(settings: Mapping[str, Any]) -> tuple[str, str | None]:
    """(dtype, quantization) of a candidate's settings; quantization also read from its ``--quantization`` arg."""
    dtype = str(settings.get("dtype") or "auto").lower()
    quant = settings.get("quantization")
    args = list(settings.get("extra_args") or ())
    if quant is None and "--quantization" in args[:-1]:
        quant = args[args.index("--quantization") + 1]
    return ALIASES.get(dtype, dtype), quant


def changes_numerics(settings: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    return numerics_of(settings) != numerics_of(base)


def precision_rank(settings: Mapping[str, Any]) -> tuple[int, int]:
    """Sort key, most exact first: unquantized before quantized, then the dtype's place in DTYPE_ORDER."""
    dtype, quant = numerics_of(settings)
    place = DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)
    return (0 if quant is None else 1, place)


def reference_of(settings: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The reference candidate's name: the highest precision served, the first listed among equals."""
    names = list(settings)
    return min(names, key=lambda n: (precision_rank(settings[n]), names.index(n))) if names else None


def prefix_share(reference: str, text: str) -> float:
    """Share of ``reference`` that ``text`` matches before their first difference (1.0 for two empty texts)."""
    if not reference:
        return 1.0 if not text else 0.0
    same = next((i for i, (a, b) in enumerate(zip(reference, text, strict=False)) if a != b),
                min(len(reference), len(text)))
    return same / len(reference)


def agreement(reference: Sequence[RequestRecord], other: Sequence[RequestRecord], min_exact_share: float
              ) -> dict[str, Any]:
    """The gate's figures over the requests both completed with text: judged on the exact-match share."""
    ref = {r.index: r.output_text for r in reference if r.completed and r.output_text is not None}
    pairs = [(ref[r.index], r.output_text) for r in other
             if r.completed and r.output_text is not None and r.index in ref]
    stated = {"metric": "exact_match_share", "min_exact_share": min_exact_share,
              "tolerance": round(1 - min_exact_share, 6)}
    if not pairs:
        return {"requests": 0, "passed": False, "mean_prefix_share": None, "exact_share": None, **stated,
                "reason": "no request has outputs from both the candidate and the reference"}
    exact = sum(a == b for a, b in pairs) / len(pairs)
    mean = sum(prefix_share(a, b) for a, b in pairs) / len(pairs)
    passed = exact >= min_exact_share
    return {"requests": len(pairs), "mean_prefix_share": round(mean, 4), "exact_share": round(exact, 4),
            **stated, "passed": passed,
            "reason": f"greedy outputs equal to the reference's on {exact:.1%} of {len(pairs)} requests "
                      f"{'>=' if passed else '<'} {min_exact_share:.0%} (tolerance {1 - min_exact_share:.0%} "
                      "may differ)"}
