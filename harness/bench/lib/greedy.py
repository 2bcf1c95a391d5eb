"""Greedy outputs against a fixed reference: a served configuration's precision, and how far its answers agree.

Two benches judge answers this way: bench-72's numerics gate (a faster dtype against the highest precision served)
and bench-68's identity check (speculation against speculation off, both served in float32). The reference is
fixed and stated, never whichever configuration ran first; per request the question is whether the output text
equals the reference's exactly, and the verdict passes when the exact-match share is at least ``min_exact_share``:
the stated tolerance is the share of requests allowed to differ (1 − min_exact_share), as MLPerf's accuracy runs
state theirs against an fp32 reference. The mean prefix share (text matched before the first difference) is
recorded beside it as a description, not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.client.records import RequestRecord

# Precision order of the served dtype, most exact first ("auto" is the engine's own choice: unknown, so last).
DTYPE_ORDER = ("float32", "bfloat16", "float16", "auto")
ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


def numerics_of(settings: Mapping[str, Any]) -> tuple[str, str | None]:
    """(dtype, quantization) of a candidate's settings; quantization also read from its ``--quantization`` arg."""
    dtype = str(settings.get("dtype") or "auto").lower()
    quant = settings.get("quantization")
    args = list(settings.get("extra_args") or ())
    if quant is None and "--quantization" in args[:-1]:
        quant = args[args.index("--quantization") + 1]
    return ALIASES.get(dtype, dtype), quant


def precision_rank(settings: Mapping[str, Any]) -> tuple[int, int]:
    """Sort key, most exact first: unquantized before quantized, then the dtype's place in DTYPE_ORDER."""
    dtype, quant = numerics_of(settings)
    place = DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)
    return (0 if quant is None else 1, place)


def first_difference(reference: str, text: str) -> int:
    """The index of the first character where ``text`` differs from ``reference`` (the shorter length if none)."""
    return next((i for i, (a, b) in enumerate(zip(reference, text, strict=False)) if a != b),
                min(len(reference), len(text)))


def prefix_share(reference: str, text: str) -> float:
    """Share of ``reference`` that ``text`` matches before their first difference (1.0 for two empty texts)."""
    if not reference:
        return 1.0 if not text else 0.0
    return first_difference(reference, text) / len(reference)


def agreement(reference: Sequence[RequestRecord], other: Sequence[RequestRecord], min_exact_share: float
              ) -> dict[str, Any]:
    """The verdict's figures over the requests both completed with text: judged on the exact-match share. Each of
    ``other``'s records counts (several repeats of one request count several times); the reference holds one
    text per request index."""
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
