"""Capacity from exceedance counts: the monotone binomial point, the clustered fixed-sequence lower bound, n needed."""

from __future__ import annotations

import pytest

from harness.bench.lib.exceedance import ProbeCount, design_effect, exceedance_capacity, needed_requests, per_rate
from harness.contract.distribution import binomial_upper


def probe(rate: float, n: int, k: int, failed: str = "", spread: bool = True) -> ProbeCount:
    """n requests, k of them exceeding: spread evenly (independent-looking) or in one run (a queue's burst)."""
    if spread:
        hits = {round(i * n / k) for i in range(k)} if k else set()
    else:
        hits = set(range(k))
    return ProbeCount(rate, tuple(i in hits for i in range(n)), failed)


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
    assert "deploy up to 2 req/s (95% lower bound" in got.text()


def test_a_probe_too_small_can_never_certify_a_rate_and_says_how_many_it_needs():
    got = exceedance_capacity([probe(1.0, 28, 0), probe(2.0, 28, 0), probe(4.0, 28, 5)])
    assert got.lower_rps is None and got.point_rps == pytest.approx(2.0 + 0.01 / (5 / 28) * 2.0)
    assert "0 of 28 requests exceeded" in got.status and "needs >= 299 requests" in got.status


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
