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


def test_a_short_probe_is_never_read_as_stationary_and_a_grown_queue_fails(script):
    arrivals, lat = script.mm1_probe(1.0, 2.0, 10.0, 12, np.random.default_rng(0))
    assert "not ruled out" in script.queue_probe_count(1.0, arrivals, lat, 1e6).failed
    arrivals, lat = script.mm1_probe(4.0, 2.0, 100.0, 12, np.random.default_rng(0))  # twice the service rate
    assert script.queue_probe_count(4.0, arrivals, lat, 1e6).failed == "queue grew"


def test_the_lower_bound_holds_where_the_point_estimate_does_not(script):
    got = script.queue_coverage(trials=5, resamples=50, binding=0.75, probe_seconds=300.0, requests=12)
    assert got["truth_rps"] == 1.5 and math.isclose(got["binding"], 0.75)
    # long probes certify a rate at or under the truth, while the fitted point lies above it
    assert got["new_lower_holds"] == 1.0 and got["new_certified"] >= 0.6
    assert got["old_point_meets_slo"] <= 0.4
