"""A small run of benchmarks/coverage.py: the default interval holds its coverage on simulated nulls and effects."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage.py"


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("coverage_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case,repeats", [("ar1", 3), ("p99-of-30", 5)])
def test_the_t_interval_covers_near_nominal(coverage, case, repeats):
    chosen = next(c for c in coverage.CASES if c.name == case)
    got = coverage.simulate(chosen, repeats, 300, seed=1, legacy=False)
    # 300 simulations: a binomial standard error of 1.3 points, so 4 points is three of them
    assert abs(got["cover_null"] - 0.95) < 0.04 and abs(got["cover_effect"] - 0.95) < 0.04
    assert got["below_null"] < 0.065
    assert got["adopt_margin"] == 0.0 if repeats < 5 else got["adopt_margin"] < 0.065


def test_the_script_prints_its_table(coverage, capsys):
    coverage.main(["--sims", "30", "--cases", "iid", "--repeats", "5"])
    out = capsys.readouterr().out
    assert "cov (null)" in out and "iid" in out and "Student t" in out


def test_abba_order_keeps_false_adopt_nominal_where_a_b_a_b_drifts(coverage):
    # 300 simulations of a host 1 % faster every arm run, the effect on the margin (2000: A B A B 13.7 %, ABBA 2.1 %)
    abab = coverage.drift_order("ABAB", 8, 300, seed=3)
    abba = coverage.drift_order("ABBA", 8, 300, seed=3)
    assert abab["adopt_margin"] > 0.08 and abba["adopt_margin"] < 0.065
    assert abs(abba["cover"] - 0.95) < 0.04


def test_bench81s_t_interval_covers_where_the_bootstrap_over_three_rounds_did_not(coverage):
    got = coverage.rounds_coverage(3, 300, seed=4)  # 2000: bootstrap 75.0 %, t 95.2 %
    assert abs(got["t"] - 0.95) < 0.04 and got["bootstrap"] < 0.85
