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
