"""The capacity search on synthetic latency-vs-rate curves (hand-computed sequences, and a noisy curve)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.lib.search import (
    Probe,
    SearchConfig,
    binding,
    bounds,
    capacity,
    next_rate,
)


def p99_ttft_ms(rate: float, *, base_ms: float = 100.0, service_rps: float = 3.75) -> float:
    """An M/M/1-like curve: latency grows as 1 / (1 - utilisation) and is unbounded at saturation."""
    return math.inf if rate >= service_rps else base_ms / (1 - rate / service_rps)


def run_search(cfg: SearchConfig, passes) -> list[Probe]:
    probes: list[Probe] = []
    while (rate := next_rate(cfg, probes)) is not None:
        ok = passes(rate, len(probes))
        probes.append(Probe(rate, ok, () if ok else ("TTFT P99",)))
    return probes


def test_bracket_then_bisect_then_confirm_in_the_hand_computed_order():
    # The SLO (300 ms) holds up to 2.5 req/s on this curve: 100 / (1 - r/3.75) <= 300  <=>  r <= 2.5.
    cfg = SearchConfig(start_rps=1.0, growth=2.0, rel_tol=0.25, repeats=2)
    probes = run_search(cfg, lambda r, _: p99_ttft_ms(r) <= 300)
    # 1 and 2 hold, 4 fails; sqrt(2*4)=2.83 fails; 2.83/2 > 1.25 so sqrt(2*2.83)=2.38 holds;
    # 2.83/2.38 = 1.19 <= 1.25: confirm 2.38 then 2.83 (two runs each).
    assert [p.rate_rps for p in probes] == [1.0, 2.0, 4.0, 2.83, 2.38, 2.38, 2.83]
    cap = capacity(cfg, probes)
    assert (cap.capacity_rps, cap.upper_rps, cap.status, cap.confirmed) == (2.38, 2.83, "bracketed", True)
    assert cap.capacity_rps <= 2.5 < cap.upper_rps and cap.upper_rps / cap.capacity_rps <= 1 + cfg.rel_tol
    assert cap.rates["2.38"] == {"runs": 2, "passes": 2} and cap.rates["4"] == {"runs": 1, "passes": 0}


def test_a_start_above_capacity_brackets_downwards():
    cfg = SearchConfig(start_rps=8.0, growth=2.0, rel_tol=0.5, repeats=1)
    probes = run_search(cfg, lambda r, _: p99_ttft_ms(r) <= 300)
    assert [p.rate_rps for p in probes][:3] == [8.0, 4.0, 2.0]
    cap = capacity(cfg, probes)
    assert cap.capacity_rps <= 2.5 < cap.upper_rps and cap.status == "bracketed"


def test_a_repeat_that_fails_at_the_lower_end_moves_the_bracket_down_and_bisection_resumes():
    cfg = SearchConfig(start_rps=1.0, growth=2.0, rel_tol=0.25, repeats=2)
    probes = [Probe(1.0, True), Probe(2.0, True), Probe(4.0, False), Probe(2.83, False), Probe(2.38, True),
              Probe(2.38, False)]  # the confirming run at 2.38 fails
    assert bounds(probes) == (2.0, 2.38, 2.83)
    # 2.38 / 2 = 1.19 is narrow enough: confirm the new lower end (2 has one run), then 2.38, then 2.83.
    assert next_rate(cfg, probes) == 2.0
    probes.append(Probe(2.0, True))
    assert next_rate(cfg, probes) == 2.83  # 2.38 already has two runs (mixed), 2.83 has one
    probes.append(Probe(2.83, False))
    assert next_rate(cfg, probes) is None
    cap = capacity(cfg, probes)
    assert (cap.capacity_rps, cap.upper_rps, cap.confirmed) == (2.0, 2.83, True)


def test_a_mixed_first_failure_looks_higher_for_a_rate_that_fails_in_every_run():
    cfg = SearchConfig(start_rps=1.0, growth=2.0, rel_tol=1.0, repeats=2)
    probes = [Probe(1.0, True), Probe(2.0, False), Probe(1.0, True), Probe(2.0, True)]
    assert bounds(probes) == (1.0, 2.0, None)
    assert next_rate(cfg, probes) == 4.0
    probes += [Probe(4.0, False), Probe(4.0, False)]
    assert next_rate(cfg, probes) is None and capacity(cfg, probes).upper_rps == 4.0


@pytest.mark.parametrize("passes, status, cap_rps, upper", [
    (lambda r, _: True, "every probed rate held (up to 8 req/s, the search's ceiling)", 8.0, None),
    (lambda r, _: False, "no probed rate held (down to 0.125 req/s)", None, 0.125),
])
def test_searches_that_cannot_bracket_say_so(passes, status, cap_rps, upper):
    cfg = SearchConfig(start_rps=1.0, growth=2.0, min_rps=0.1, max_rps=10.0)
    probes = run_search(cfg, passes)
    cap = capacity(cfg, probes)
    assert (cap.status, cap.capacity_rps, cap.upper_rps, cap.confirmed) == (status, cap_rps, upper, False)


def test_the_probe_budget_bounds_the_search_and_is_reported():
    cfg = SearchConfig(start_rps=1.0, growth=2.0, rel_tol=0.01, repeats=3, max_probes=5)
    probes = run_search(cfg, lambda r, _: p99_ttft_ms(r) <= 300)
    assert len(probes) == 5
    assert capacity(cfg, probes).status == "the probe budget was spent before the bracket was confirmed"


def test_a_noisy_curve_gives_intervals_that_hold_the_true_capacity():
    """Lognormal noise (sigma 0.1) on the P99: the confirmed interval brackets 2.5 req/s in most seeds."""
    covered, widths = 0, []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        cfg = SearchConfig(start_rps=0.7, growth=2.0, rel_tol=0.2, repeats=3, max_probes=16)
        probes = run_search(cfg, lambda r, _, rng=rng: p99_ttft_ms(r) * rng.lognormal(0, 0.1) <= 300)
        cap = capacity(cfg, probes)
        assert len(probes) <= 16 and cap.capacity_rps is not None
        covered += cap.upper_rps is not None and cap.capacity_rps <= 2.5 <= cap.upper_rps
        widths.append((cap.upper_rps or math.inf) / cap.capacity_rps)
    assert covered >= 34, covered
    assert np.median(widths) < 1.5


def test_binding_names_the_limit_broken_at_the_lowest_rate():
    probes = [Probe(1.0, True), Probe(4.0, False, ("TTFT P99", "TPOT P99")), Probe(2.0, False, ("TPOT P99",)),
              Probe(2.0, True)]
    assert binding(probes) == (("TPOT P99",), 2.0)
    assert binding([Probe(1.0, True)]) == ((), None)
