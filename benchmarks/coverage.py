"""Coverage and false-adopt rate of the bench framework's interval and decision code, by simulation.

Each case draws per-repeat request latencies for arms A and B, runs them through
``harness.bench.stats.paired_ratio_effect`` and ``decide`` exactly as a bench does, and
counts how often the 95 % interval covers the true ratio and how often the decision
adopts when it should not:

- ``iid``       requests i.i.d. lognormal (sigma 0.3), 30 per arm run, median;
- ``run-effect`` the same with a per-arm-run multiplicative start effect (sigma 0.1);
- ``ar1``       log latencies AR(1) within a run (phi 0.8): a loaded queue's autocorrelation;
- ``p99-of-30`` the P99 of 30 i.i.d. requests (the sample maximum, nearly).

Two designs as the runner executes them follow:

- order under drift: a host that gets 1 % faster every arm run (requests lognormal sigma 0.1, 30 per run,
  median), arms A B A B every round against the runner's order (``spec.interleaved``: ABBA), the true effect
  on the 5 % margin; coverage of it and the share of adopt decisions (nominal at most 2.5 %);
- bench-81's rounds: speedup 1.8 over 3 (or 5) rounds of alternating restarts, each start's throughput with a
  start effect (sigma 5 %) and each round a drift both sides share (sigma 3 %); coverage of the true speedup by
  the percentile bootstrap over rounds it used and by Student t on the per-round log ratios it uses
  (``bench81.scaling.paired_log_ratio``).

Columns: coverage of the true ratio under no effect (1.0) and under a known effect (0.8);
``CI<1 (null)``: the interval lies entirely below 1 under no effect (the one-sided error,
nominal 2.5 %); ``adopt@margin``: the decision adopts when the true effect sits exactly on
the 5 % margin (nominal at most 2.5 %; 0 with 3 repeats, which are single evidence);
``legacy cov``: the former two-level percentile bootstrap, for comparison (``--legacy``).

Then a table has one row per bench design as the runner executes it (``coverage_designs.py``): its n, nominal
coverage, simulated coverage with its Monte-Carlo margin, false-adopt rate at the margin edge and its stated level.
The exit status is non-zero when a design outside ``KNOWN_FAILURES`` leaves nominal, or a known one holds.

    python benchmarks/coverage.py                 # 2000 simulations per cell and per design
    python benchmarks/coverage.py --sims 400 --legacy
    python benchmarks/coverage.py --small         # the designs only, 600 simulations each (the CI check)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.bench.benches.bench81.scaling import paired_log_ratio
from harness.bench.metrics import percentile
from harness.bench.spec import Arm, interleaved
from harness.bench.stats import DEFAULT_CONFIDENCE, decide, paired_ratio_effect

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, when loaded from elsewhere (the test)
import coverage_designs as designs  # noqa: E402

MARGIN = 0.05
SMALL_SIMS = 600
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


DRIFT = -0.01  # per arm run: the host gets 1 % faster with every run
SPEEDUP, START_SD, ROUND_SD = 1.8, 0.05, 0.03
GAIN = 0.15  # the true gain whose adopt share shows a cross-start design's power


def drift_order(order: str, repeats: int, sims: int, *, seed: int) -> dict[str, float]:
    """Coverage of the true effect (on the margin) and adopt share when the host drifts ``DRIFT`` per arm run and
    the arms run in ``order``: "ABAB" (A B every round) or "ABBA" (the runner's ``interleaved``)."""
    arms = (Arm("A", "w", "s"), Arm("B", "w", "s"))
    steps = interleaved(arms, repeats) if order == "ABBA" else [(r, a) for r in range(1, repeats + 1) for a in arms]
    rng, truth = np.random.default_rng(seed), 1 / (1 + MARGIN)
    cover = adopt = 0
    for _ in range(sims):
        runs = {(arm.label, r): (truth if arm.label == "B" else 1.0) * (1 + DRIFT) ** i * 100.0
                * rng.lognormal(0.0, 0.1, N_REQUESTS) for i, (r, arm) in enumerate(steps)}
        eff = paired_ratio_effect([(runs[("A", r)], runs[("B", r)]) for r in range(1, repeats + 1)], resamples=0,
                                  statistic=np.median)
        cover += eff.ci_low <= truth <= eff.ci_high
        adopt += decide(eff, better="lower", margin=MARGIN).decision == "adopt"
    return {"cover": cover / sims, "adopt_margin": adopt / sims}


def bootstrap_rounds(num: np.ndarray, den: np.ndarray, rng: np.random.Generator, resamples: int = 1000
                     ) -> tuple[float, float]:
    """bench-81's former interval: rounds resampled jointly, the ratio of the resampled means, percentile."""
    idx = rng.integers(0, num.size, size=(resamples, num.size))
    lo, hi = np.quantile(num[idx].mean(axis=1) / den[idx].mean(axis=1), [0.025, 0.975])
    return float(lo), float(hi)


def rounds_coverage(rounds: int, sims: int, *, seed: int) -> dict[str, float]:
    """Coverage of the true speedup over ``rounds`` alternating-restart rounds: bootstrap (former) and t (now)."""
    rng = np.random.default_rng(seed)
    boot = t = 0
    for _ in range(sims):
        drift = np.exp(ROUND_SD * rng.standard_normal(rounds))
        base = 100.0 * drift * np.exp(START_SD * rng.standard_normal(rounds))
        layout = SPEEDUP * 100.0 * drift * np.exp(START_SD * rng.standard_normal(rounds))
        lo, hi = bootstrap_rounds(layout, base, rng)
        boot += lo <= SPEEDUP <= hi
        r = paired_log_ratio(layout, base)
        t += r is not None and r.ci_low <= SPEEDUP <= r.ci_high
    return {"bootstrap": boot / sims, "t": t / sims}


def method_rows(sims: int, seed: int) -> tuple[list[str], bool]:
    """The former and the current method of two designs side by side, and whether the current one holds."""
    lines, ok = ["order under drift (-1 %/run), effect on the 5 % margin: coverage / adopt"], True
    for repeats in (5, 8):
        got = {o: drift_order(o, repeats, sims, seed=seed + repeats) for o in ("ABAB", "ABBA")}
        lines.append(f"  {repeats} repeats: A B A B {got['ABAB']['cover']:.1%} / {got['ABAB']['adopt_margin']:.1%}"
                     f"   ABBA {got['ABBA']['cover']:.1%} / {got['ABBA']['adopt_margin']:.1%}")
        ok &= abs(got["ABBA"]["cover"] - DEFAULT_CONFIDENCE) <= 0.02 and got["ABBA"]["adopt_margin"] <= 0.045
    lines.append(f"bench-81 speedup {SPEEDUP:g} over alternating-restart rounds: coverage")
    for rounds in (3, 5):
        got_r = rounds_coverage(rounds, sims, seed=seed + 10 * rounds)
        lines.append(f"  {rounds} rounds: percentile bootstrap {got_r['bootstrap']:.1%}   Student t on log ratios "
                     f"{got_r['t']:.1%}")
        ok &= abs(got_r["t"] - DEFAULT_CONFIDENCE) <= 0.02
    lines.append(f"cross-start with the pooled start variance, a true gain of {GAIN:.0%}: adopt share (power)")
    powers = []
    for k, sd in enumerate(designs.START_SDS):
        run, rng = designs.cross_claim(sd, 1 / (1 + GAIN)), np.random.default_rng(seed + 100 + k)
        powers.append(f"start sd {sd:.0%} {np.mean([run(rng).adopted for _ in range(sims)]):.1%}")
    lines.append("  " + "   ".join(powers))
    return lines, ok


@dataclass(frozen=True)
class DesignRow:
    design: designs.Design
    sims: int
    coverage: float
    decided: int  # runs that produced an interval (the others stopped early on their re-run budget)
    false_adopt: float

    @property
    def coverage_se(self) -> float:
        return math.sqrt(self.design.nominal * (1 - self.design.nominal) / max(1, self.decided))

    @property
    def adopt_se(self) -> float:
        level = self.design.level or designs.LEVEL
        return math.sqrt(level * (1 - level) / self.sims)

    @property
    def coverage_tolerance(self) -> float:
        """The method's 2 points plus three Monte-Carlo standard errors at nominal (the simulation's own noise)."""
        return designs.METHOD_TOLERANCE + 3 * self.coverage_se

    def failures(self) -> list[str]:
        out = []
        if abs(self.coverage - self.design.nominal) > self.coverage_tolerance:
            out.append(f"coverage {self.coverage:.1%} beyond {self.design.nominal:.0%} ± "
                       f"{self.coverage_tolerance:.1%}")
        if self.design.level is not None and self.false_adopt > self.design.level + 3 * self.adopt_se:
            out.append(f"false adopt {self.false_adopt:.1%} > {self.design.level:.1%} + {3 * self.adopt_se:.1%}")
        if self.design.capped and self.false_adopt > 0:
            out.append(f"false adopt {self.false_adopt:.1%} from a claim capped below paired")
        return out


def simulate_design(design: designs.Design, sims: int, seed: int) -> DesignRow:
    rng = np.random.default_rng(seed)
    outcomes = [design.run(rng) for _ in range(sims)]
    decided = [o.covered for o in outcomes if o.covered is not None]
    return DesignRow(design, sims, float(np.mean(decided)) if decided else float("nan"), len(decided),
               float(np.mean([o.adopted for o in outcomes])))


def design_table(rows: Sequence[DesignRow]) -> str:
    head = (f"{'design':<29} {'n':>2} {'nominal':>7} {'coverage ± MC 95%':>17} {'false adopt':>11} {'level':>5}  "
            "status")
    lines = [head, "-" * len(head)]
    for r in rows:
        cov = f"{r.coverage:.1%} ± {1.96 * r.coverage_se:.1%}"
        level = f"{r.design.level:.1%}" if r.design.level is not None else "-"
        adopt = f"{r.false_adopt:.1%}" if r.design.level is not None else "-"
        status = "ok" if not r.failures() else ("KNOWN " if r.design.name in designs.KNOWN_FAILURES else "FAIL ") + \
            "; ".join(r.failures())
        lines.append(f"{r.design.name:<29} {r.design.n:>2} {r.design.nominal:>7.0%} {cov:>17} {adopt:>11} "
                     f"{level:>5}  {status}")
    return "\n".join(lines)


def design_rows(sims: int, seed: int) -> list[DesignRow]:
    return [simulate_design(d, sims, seed + 1000 * i) for i, d in enumerate(designs.designs())]


def design_report(rows: Sequence[DesignRow]) -> tuple[str, list[str]]:
    """The per-design table and what is wrong with it: a design outside ``KNOWN_FAILURES`` that fails, or a known
    failure that now holds (the list is kept exact)."""
    failing = {r.design.name for r in rows if r.failures()}
    known = set(designs.KNOWN_FAILURES) & {r.design.name for r in rows}
    bad = [f"{name}: leaves nominal" for name in sorted(failing - known)]
    bad += [f"{name}: listed as a known failure but holds" for name in sorted(known - failing)]
    head = (f"Bench designs as the runner executes them, truth on the {designs.MARGIN:.0%} margin edge; "
            f"{rows[0].sims if rows else 0} simulations per row; tolerance {designs.METHOD_TOLERANCE:.0%} + 3 MC se")
    notes = [f"  {r.design.name}: {r.design.how}" + (f"; {r.sims - r.decided} of {r.sims} ended without an interval" if
                                                      r.decided < r.sims else "") for r in rows]
    known_lines = [f"  known failure, {k}: {v}" for k, v in designs.KNOWN_FAILURES.items()]
    return "\n".join([head, design_table(rows), *notes, *known_lines]), bad


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=2000, help="simulations per case and repeat count, and per design")
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--cases", nargs="+", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    parser.add_argument("--legacy", action="store_true", help="also the former bootstrap (a fifth of the sims)")
    parser.add_argument("--small", action="store_true", help=f"the designs only, {SMALL_SIMS} simulations each")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bad = []
    if not args.small:
        rows = []
        for i, case in enumerate(c for c in CASES if c.name in args.cases):
            for repeats in args.repeats:
                rows.append((case.name, repeats, simulate(case, repeats, args.sims, seed=args.seed + 100 * i + repeats,
                                                          legacy=args.legacy)))
        print(f"Student t on per-repeat log ratios, 95 %; {args.sims} simulations per row; margin {MARGIN:.0%}")
        print(table(rows))
        bad = [f"{name} x{repeats}" for name, repeats, r in rows if not within_nominal(r)]
        methods, methods_ok = method_rows(args.sims, args.seed + 1000)
        print("\n".join(methods))
        bad += [] if methods_ok else ["a design's method (ABBA order or bench-81's t)"]
        print("every case within 2 percentage points of nominal" if not bad else f"outside nominal: {', '.join(bad)}")
        print()
    text, wrong = design_report(design_rows(SMALL_SIMS if args.small else args.sims, args.seed))
    print(text)
    print("every design as stated (known failures fail, the rest hold)" if not wrong else "; ".join(wrong))
    return 1 if bad or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
