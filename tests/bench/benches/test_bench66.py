"""bench-66's load sweep through the one runner against a stand-in engine (fast; the real server: test_bench66_integration)."""

from __future__ import annotations

import io
import json

from harness.bench.benches.bench66 import SPEC, Config
from harness.bench.lib.sweep import LoadPoint, saturation
from harness.bench.runner import run_bench
from harness.contract.schemas import validate_file
from harness.progress import Reporter
from tests.bench.test_bench_runner import bench_env  # noqa: F401  (fixtures)


def point(label: str, offered: float, achieved: float, ttft_p99: float, valid: bool = True) -> LoadPoint:
    return LoadPoint(label, offered, None, 3, valid, () if valid else ("send lag",), achieved, (achieved, achieved),
                     achieved * 30, (achieved * 30, achieved * 30), {"ttft_ms.p99": ttft_p99})


def test_the_saturation_rule_takes_the_highest_level_that_keeps_up_and_stays_fast():
    points = [point("a", 1.0, 0.99, 100.0), point("b", 2.0, 1.95, 180.0), point("c", 3.0, 2.9, 290.0),
              point("d", 4.0, 3.0, 250.0), point("e", 5.0, 4.9, 1000.0, valid=False)]
    sat = saturation(points, tolerance=0.10, ttft_factor=3.0)
    assert sat.light.label == "a" and sat.point.label == "c"  # d falls behind (3.0 < 3.6), c: 290 <= 300
    assert sat.verdicts["d"] == "throughput falls behind the offered load" and sat.verdicts["e"].startswith("invalid")
    assert saturation(points, tolerance=0.10, ttft_factor=1.5).point.label == "a"  # b's 180 ms > 150 ms


def test_a_sweep_runs_levels_in_rounds_and_reads_the_curve(bench_env):  # noqa: F811
    cfg = Config(backend="fake", runtime="local", repeats=2, requests=4, input_tokens=24, output_tokens=6,
                 rates=(2.0, 8.0), concurrencies=(2,), warmup_requests=1, resamples=200)
    outcome = run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    run_dir = outcome.run_dir
    assert validate_file(run_dir / "sweep.json") == [] and not outcome.failed
    doc = json.loads((run_dir / "sweep.json").read_text())
    order = [(a["label"], a["repeat"]) for a in doc["details"]["arm_runs"]]
    assert order == [("rate=2/s", 1), ("rate=8/s", 1), ("closed c=2", 1), ("rate=2/s", 2), ("rate=8/s", 2),
                     ("closed c=2", 2)]  # no probe: the rates were given
    points = {p["label"]: p for p in doc["details"]["points"]}
    assert points["rate=2/s"]["offered_rps"] == 2.0 and points["closed c=2"]["concurrency"] == 2
    assert doc["details"]["baseline"]["dtype"] == "bfloat16" and doc["details"]["saturation"]["light_load"]
    assert json.loads((run_dir / "run.json").read_text())["outputs"]["figures"] == ["latency_throughput.png"]
    assert doc["conclusion"]["decision"] == "inconclusive" and doc["kind"] == "sweep"
