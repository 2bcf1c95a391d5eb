"""bench-68's co-residence shift: the kept-up baseline beside each variant, against itself alone.

Every variant runs on its own start beside the baseline, which stays up; on a host whose cores
the two servers share, the companion changes the baseline itself. The plan measures the baseline
alone first (phase ``off``, arm ``copy/off``: the same server start, before any variant is up),
and the reading reports, per variant, the baseline's paired TPOT p50 and E2E p50 ratio beside it
(``copy/off@<variant>``) against alone, with the interval. Alone runs come first, so a drift in
time is folded into the shift; it is reported, not corrected, and decides nothing (so an invalid alone run is
left out, never redone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.bench.claims import claim_effect
from harness.bench.metrics import E2E_P50, TPOT_P50
from harness.bench.records import ArmRun
from harness.bench.spec import Arm, Claim, History, Step

ALONE = "copy/off"


ALONE_ARM = Arm(ALONE, "copy", "off")


def alone_steps(repeats: int) -> Callable[[History], Iterator[Step]]:
    """The baseline alone on copy, once per repeat, before any variant starts. Made while running so an invalid one
    is left out, never redone: the shift it feeds decides nothing, so it spends none of the re-run budget."""
    def steps(history: History) -> Iterator[Step]:
        for r in range(1, repeats + 1):
            yield r, ALONE_ARM
    return steps


def co_residence(runs: Sequence[ArmRun], variants: Sequence[str], *, seed: int, resamples: int) -> dict[str, Any]:
    """Per variant the baseline's TPOT and E2E p50 ratio beside it against alone; lines for the summary."""
    rows, lines = [], []
    for i, name in enumerate(variants):
        beside = f"copy/off@{name}"
        effects = {m.name: claim_effect(runs, Claim(m, ALONE, beside), seed=seed + 2 * i + k, resamples=resamples)
                   for k, m in enumerate((TPOT_P50, E2E_P50))}
        got = {k: None if c is None else {"value": round(c.effect.value, 6), "ci_low": round(c.effect.ci_low, 6),
                                          "ci_high": round(c.effect.ci_high, 6), "n_repeats": c.effect.n_pairs}
               for k, c in effects.items()}
        rows.append({"variant": name, "baseline_beside": beside, "alone": ALONE, **got})
        tpot = got[TPOT_P50.name]
        if tpot is not None:
            lines.append(f"  baseline beside {name}: TPOT p50 x{tpot['value']:.2f} [{tpot['ci_low']:.2f}, "
                         f"{tpot['ci_high']:.2f}] of itself alone")
    if not lines:
        return {"measured": False, "rows": rows,
                "lines": ["co-residence shift: not measured (no baseline-alone run paired with a variant phase)"]}
    head = "co-residence shift (the kept-up baseline beside each variant / alone on the same start, alone first):"
    return {"measured": True, "rows": rows, "lines": [head, *lines]}
