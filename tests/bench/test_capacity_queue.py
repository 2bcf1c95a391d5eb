"""benchmarks/capacity_coverage.py's queue case: bench-72's probes on an M/M/1 server started empty."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "capacity_coverage.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("capacity_coverage_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_probe_is_scheduled_at_its_rate_and_starts_empty(script):
    arrivals, latency_ms = script.mm1_probe(1.0, 2.0, 10.0, 12, np.random.default_rng(0))
    assert len(arrivals) == 12 and arrivals[0] == 0.0 and arrivals[-1] == pytest.approx(11.0)
    # the first request meets an empty server: its latency is its own service time, no wait
    assert latency_ms[0] > 0 and np.all(np.diff(arrivals) > 0)


def test_a_short_probe_is_read_against_the_ceiling_and_a_grown_queue_fails(script):
    from harness.bench.lib.exceedance import per_rate

    arrivals, lat = script.mm1_probe(1.0, 2.0, 10.0, 12, np.random.default_rng(0))
    short = script.queue_probe_count(1.0, arrivals, lat, 1e6)
    assert short.queue == "undetermined" and short.span_s == pytest.approx(11.0)
    assert "not ruled out" in per_rate([short])[0].failed[0]  # alone: no ceiling, and too short to show it flat
    arrivals, lat = script.mm1_probe(4.0, 2.0, 100.0, 12, np.random.default_rng(0))  # twice the service rate
    grown = script.queue_probe_count(4.0, arrivals, lat, 1e6)
    assert grown.queue == "falls behind" and grown.completion_rps == pytest.approx(2.0, rel=0.1)
    # beside the overloaded probe the short one at half its completion rate counts
    assert per_rate([short, grown])[0].failed == ()


def test_the_lower_bound_holds_where_the_point_estimate_does_not(script):
    got = script.queue_coverage(trials=5, resamples=50, binding=0.75, probe_seconds=300.0, requests=12)
    assert got["truth_rps"] == 1.5 and math.isclose(got["binding"], 0.75)
    # long probes certify a rate at or under the truth, while the fitted point lies above it
    assert got["new_lower_holds"] == 1.0 and got["new_certified"] >= 0.6
    assert got["old_point_meets_slo"] <= 0.4


def test_at_090_mu_the_rung_at_the_saturation_point_is_never_certified(script):
    """The schedule's rung at mu (utilisation 1) grows like sqrt(t) and read as stationary in 1 run in 3 at 300 s;
    at or over the overloaded probes' completion rate it now fails, so the bound holds."""
    got = script.queue_coverage(trials=8, resamples=20, binding=0.9, probe_seconds=300.0, requests=12)
    assert got["new_lower_holds"] == 1.0 and got["new_lower_under_p99_truth"] == 1.0 and got["new_certified"] == 1.0


def test_a_confirming_run_at_the_certified_rate_bounds_the_share_there(script):
    got = script.queue_coverage(trials=4, resamples=10, binding=0.75, probe_seconds=10.0, requests=12, offset=None,
                                confirm_s=300.0)
    # a 300-s replay at the rate 10-s probes certified: its clustered bound is far tighter than theirs, and covers
    # the true stationary share there
    assert got["confirmed"] >= 1 and got["confirm_covers"] == 1.0 and got["confirm_median_bound"] < 0.1
