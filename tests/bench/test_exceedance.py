"""Capacity from exceedance counts: the monotone binomial point, the clustered fixed-sequence lower bound, n needed."""

from __future__ import annotations

import math

import pytest

from harness.bench.lib.exceedance import (
    ProbeCount,
    ceiling,
    claim_level,
    design_effect,
    exceedance_capacity,
    independent_requests,
    needed_requests,
    per_rate,
    relaxation_s,
    stationarity,
)
from harness.contract.distribution import binomial_upper


def probe(rate: float, n: int, k: int, failed: str = "", spread: bool = True, span: float = math.inf,
          done: float | None = None) -> ProbeCount:
    """n requests, k of them exceeding: spread evenly (independent-looking) or in one run (a queue's burst)."""
    if spread:
        hits = {round(i * n / k) for i in range(k)} if k else set()
    else:
        hits = set(range(k))
    return ProbeCount(rate, tuple(i in hits for i in range(n)), failed, completion_rps=done, span_s=span)


def test_299_requests_without_an_exceedance_are_needed_for_a_1_percent_claim():
    assert needed_requests() == 299 and needed_requests(0.05) == 59
    assert binomial_upper(0, 299) <= 0.01 < binomial_upper(0, 298)


def test_the_lower_bound_is_the_last_rate_of_the_fixed_sequence_that_certifies():
    probes = [probe(1.0, 600, 0), probe(2.0, 600, 1), probe(4.0, 600, 30), probe(8.0, 600, 400)]
    got = exceedance_capacity(probes)
    # 1/600 has a one-sided 95 % bound of 0.79 %: certified; 30/600 (5 %) is not
    assert got.lower_rps == 2.0 and got.status.startswith("certified")
    # the monotone fit: 0, 1/600 then 5 %: crossing 1 % between 2 and 4 req/s
    assert got.point_rps == pytest.approx(2.0 + (0.01 - 1 / 600) / (0.05 - 1 / 600) * 2.0)
    assert [r.exceeded for r in got.rates] == [0, 1, 30, 400]
    assert "deploy up to 2 req/s (one-sided lower bound: <= 1.0% of requests over the SLO limits at 95%)" in got.text()


def test_a_small_probe_certifies_only_the_looser_share_its_requests_can_show_and_says_so():
    got = exceedance_capacity([probe(1.0, 28, 0), probe(2.0, 28, 0), probe(4.0, 28, 5)])
    # 28 requests without an exceedance show <= 1 - 0.05^(1/28) = 10.1 %, not 1 %: that is the claim, stated
    assert got.lower_rps == 2.0 and got.claim_exceedance == pytest.approx(1 - 0.05 ** (1 / 28), abs=1e-5)
    assert got.point_rps == pytest.approx(2.0 + 0.01 / (5 / 28) * 2.0)
    assert "<= 10.1% of requests over the SLO limits at 95%; 299 requests a rate would show <= 1%" in got.text()
    assert claim_level(299) == 0.01 and claim_level(28) > 0.1 > claim_level(29)


def test_a_share_looser_than_one_in_four_is_never_certified_but_marks_where_a_confirming_run_may():
    got = exceedance_capacity([probe(1.0, 8, 0), probe(2.0, 8, 0), probe(4.0, 8, 4)])
    # 8 requests without an exceedance show no share under 1 - 0.05^(1/8) = 31 %: nothing to rank a candidate by
    assert got.lower_rps is None and got.claim_exceedance is None and got.supported_rps == 2.0
    assert "too few independent ones to show any share under 25% (at best 31.2%)" in got.status


def test_a_rate_at_the_ceiling_an_overloaded_probe_completed_at_never_certifies_even_with_a_flat_queue():
    """A queue at utilisation 1 grows like sqrt(t): its slopes can read flat and its exceedances few, so a rate at
    or over 95 % of what an overloaded probe of the candidate completed fails whatever it counts."""
    probes = [probe(1.0, 400, 0, span=300.0), probe(2.0, 600, 0, span=300.0, done=2.02),
              probe(4.0, 900, 0, failed="queue grew", span=300.0, done=2.0)]
    assert ceiling(probes) == 2.0  # 2.02 at 2 req/s kept up with its arrivals: not overloaded
    got = exceedance_capacity(probes)
    assert got.lower_rps == 1.0 and got.ceiling_rps == 2.0
    assert got.rates[1].failed == ("at or over 95% of the 2 req/s the server completed when overloaded",)
    # without the overloaded probe nothing sets a ceiling: only a queue shown flat counts
    assert stationarity("undetermined") and not stationarity("keeps up")
    assert stationarity("undetermined", 1.0, 2.0) == "" and stationarity("falls behind", 1.0, 2.0) == "queue grew"


def test_near_its_ceiling_a_probe_counts_one_request_per_quarter_relaxation_time():
    # utilisation 0.8 of 2 req/s: relaxation 1 / (2 (1 - sqrt 0.8)^2) = 44.9 s; 300 s hold 26 independent draws
    near = probe(1.6, 480, 0, span=300.0)
    assert relaxation_s(1.6, 2.0) == pytest.approx(44.86, abs=0.01)
    assert independent_requests(near, 2.0) == 26 and independent_requests(near, None) == 480
    [rate] = per_rate([near, probe(4.0, 900, 0, failed="queue grew", done=2.0)])[:1]
    assert rate.requests == 480 and rate.level == pytest.approx(1 - 0.05 ** (1 / 26), abs=1e-4)


def test_a_probe_whose_queue_grew_fails_its_rate_and_everything_above():
    got = exceedance_capacity([probe(1.0, 400, 0), probe(2.0, 400, 0, failed="queue grew"), probe(4.0, 400, 0)])
    assert got.lower_rps == 1.0 and "queue grew" not in got.status  # certified: the status is the fit's
    assert got.rates[1].exceeded == 400 and got.rates[1].upper == 1.0
    # the monotone fit pools the failed rate with the clean one above it: the point lies below 2 req/s
    assert got.point_rps is not None and got.point_rps < 2.0


def test_exceedances_in_one_burst_widen_the_bound_through_the_design_effect():
    spread = per_rate([probe(1.0, 1000, 3)])[0]
    burst = per_rate([probe(1.0, 1000, 3, spread=False)])[0]
    assert spread.design_effect == 1.0 and burst.design_effect > 1.0
    assert burst.upper > spread.upper
    assert design_effect([probe(1.0, 100, 0)]) == 1.0  # nothing exceeded: no variance to read


def test_the_monotone_fit_pools_a_rate_that_reads_better_than_a_lower_one():
    got = exceedance_capacity([probe(1.0, 500, 10), probe(2.0, 500, 0), probe(4.0, 500, 100)])
    # 1 and 2 req/s pool to (10 + 0) / 1000 = 1 %, not over; 4 req/s (20 %) is: the fit crosses at 2 req/s
    assert got.point_rps == pytest.approx(2.0) and got.status.startswith("at 1 req/s 10 of 500")
    # the fixed sequence stops at its first rate: 10 of 500 is no evidence of <= 1 %, whatever 2 req/s read
    assert got.lower_rps is None
