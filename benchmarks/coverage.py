"""Coverage and false-adopt rate of the bench framework's interval and decision code, by simulation.

Each case draws per-repeat request latencies for arms A and B, runs them through
``harness.bench.stats.paired_ratio_effect`` and ``decide`` exactly as a bench does, and
counts how often the 95 % interval covers the true ratio and how often the decision
adopts when it should not:

- ``iid``       requests i.i.d. lognormal (sigma 0.3), 30 per arm run, median;
- ``run-effect`` the same with a per-arm-run multiplicative start effect (sigma 0.1);
- ``ar1``       log latencies AR(1) within a run (phi 0.8): a loaded queue's autocorrelation;
- ``p99-of-30`` the P99 of 30 i.i.d. requests (the sample maximum, nearly).

Columns: coverage of the true ratio under no effect (1.0) and under a known effect (0.8);
``CI<1 (null)``: the interval lies entirely below 1 under no effect (the one-sided error,
nominal 2.5 %); ``adopt@margin``: the decision adopts when the true effect sits exactly on
the 5 % margin (nominal at most 2.5 %; 0 with 3 repeats, which are single evidence);
``legacy cov``: the former two-level percentile bootstrap, for comparison (``--legacy``).

    python benchmarks/coverage.py                 # 2000 simulations per cell
    python benchmarks/coverage.py --sims 400 --legacy
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.bench.metrics import percentile
from harness.bench.stats import DEFAULT_CONFIDENCE, decide, paired_ratio_effect

MARGIN = 0.05
EFFECT = 0.8
N_REQUESTS = 30


@dataclass(frozen=True)
class Case:
    name: str
    draw: Callable[[np.random.Generator, float], np.ndarray]  # one arm run's latencies, scaled by the effect
    statistic: Callable[..., float]
    requests: int = N_REQUESTS


def _iid(rng: np.random.Generator, k: float, n: int = N_REQUESTS) -> np.ndarray:
    return k * 100.0 * rng.lognormal(0.0, 0.3, n)


def _run_effect(rng: np.random.Generator, k: float) -> np.ndarray:
    return _iid(rng, k) * math.exp(0.1 * rng.standard_normal())


def _ar1(rng: np.random.Generator, k: float, phi: float = 0.8) -> np.ndarray:
    x = np.empty(N_REQUESTS)
    x[0] = rng.standard_normal() / math.sqrt(1 - phi * phi)
    for i in range(1, N_REQUESTS):
        x[i] = phi * x[i - 1] + rng.standard_normal()
    return k * 100.0 * np.exp(0.3 * math.sqrt(1 - phi * phi) * x)


CASES = (Case("iid", _iid, np.median), Case("run-effect", _run_effect, np.median), Case("ar1", _ar1, np.median),
         Case("p99-of-30", _iid, percentile(99)))


def legacy_interval(pairs: Sequence[tuple[np.ndarray, np.ndarray]], statistic: Callable[..., float],
                    rng: np.random.Generator, resamples: int = 1000) -> tuple[float, float]:
    """The former method: resample repeats, then each arm's requests independently; percentile interval."""
    n = len(pairs)
    out = np.empty(resamples)
    for k in range(resamples):
        logs = 0.0
        for j in rng.integers(0, n, size=n):
            a, b = pairs[j]
            a_s, b_s = a[rng.integers(0, a.size, a.size)], b[rng.integers(0, b.size, b.size)]
            logs += math.log(statistic(b_s) / statistic(a_s))
        out[k] = logs / n
    lo, hi = np.quantile(out, [0.025, 0.975])
    return math.exp(lo), math.exp(hi)


def simulate(case: Case, repeats: int, sims: int, *, seed: int, legacy: bool) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    counts = {"cover_null": 0, "cover_effect": 0, "below_null": 0, "adopt_margin": 0, "legacy_cover": 0}
    legacy_sims = max(1, sims // 5) if legacy else 0
    boundary = 1 / (1 + MARGIN)
    for s in range(sims):
        for truth in (1.0, EFFECT, boundary):
            pairs = [(case.draw(rng, 1.0), case.draw(rng, truth)) for _ in range(repeats)]
            eff = paired_ratio_effect(pairs, resamples=0, statistic=case.statistic)
            covered = eff.ci_low <= truth <= eff.ci_high
            if truth == 1.0:
                counts["cover_null"] += covered
                counts["below_null"] += eff.ci_high < 1.0
                if s < legacy_sims:
                    lo, hi = legacy_interval(pairs, case.statistic, rng)
                    counts["legacy_cover"] += lo <= 1.0 <= hi
            elif truth == EFFECT:
                counts["cover_effect"] += covered
            else:
                counts["adopt_margin"] += decide(eff, better="lower", margin=MARGIN).decision == "adopt"
    out = {k: v / sims for k, v in counts.items() if k != "legacy_cover"}
    out["legacy_cover"] = counts["legacy_cover"] / legacy_sims if legacy_sims else float("nan")
    return out


def table(rows: Sequence[tuple[str, int, dict[str, float]]]) -> str:
    head = (f"{'case':<11} {'repeats':>7} {'cov (null)':>10} {'cov (x0.8)':>10} {'CI<1 (null)':>11} "
            f"{'adopt@margin':>12} {'legacy cov':>10}")
    lines = [head, "-" * len(head)]
    for name, repeats, r in rows:
        legacy = "-" if math.isnan(r["legacy_cover"]) else f"{r['legacy_cover']:.1%}"
        lines.append(f"{name:<11} {repeats:>7} {r['cover_null']:>10.1%} {r['cover_effect']:>10.1%} "
                     f"{r['below_null']:>11.1%} {r['adopt_margin']:>12.1%} {legacy:>10}")
    return "\n".join(lines)


def within_nominal(r: dict[str, float], tolerance: float = 0.02) -> bool:
    """Both coverages within ``tolerance`` of the nominal level, the one-sided errors at most 2.5 % + tolerance."""
    alpha = (1 - DEFAULT_CONFIDENCE) / 2
    return (abs(r["cover_null"] - DEFAULT_CONFIDENCE) <= tolerance and abs(r["cover_effect"] - DEFAULT_CONFIDENCE)
            <= tolerance and r["below_null"] <= alpha + tolerance and r["adopt_margin"] <= alpha + tolerance)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=2000, help="simulations per case and repeat count")
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--cases", nargs="+", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    parser.add_argument("--legacy", action="store_true", help="also the former bootstrap (a fifth of the sims)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = []
    for i, case in enumerate(c for c in CASES if c.name in args.cases):
        for repeats in args.repeats:
            rows.append((case.name, repeats, simulate(case, repeats, args.sims, seed=args.seed + 100 * i + repeats,
                                                      legacy=args.legacy)))
    print(f"Student t on per-repeat log ratios, 95 %; {args.sims} simulations per row; margin {MARGIN:.0%}")
    print(table(rows))
    bad = [f"{name} x{repeats}" for name, repeats, r in rows if not within_nominal(r)]
    print("every case within 2 percentage points of nominal" if not bad else f"outside nominal: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
