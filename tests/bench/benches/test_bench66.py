"""bench-66's load sweep through the one runner against a stand-in engine (fast; the real server:
test_bench66_integration)."""

from __future__ import annotations

import io
import json

import pytest

from harness.bench.benches.bench66 import SPEC, Config
from harness.bench.runner import run_bench
from harness.contract.schemas import validate_file
from harness.progress import Reporter
from tests.bench.test_bench_runner import bench_env  # noqa: F401  (fixtures)


def test_a_sweep_runs_levels_in_rounds_and_reads_the_curve(bench_env):  # noqa: F811
    cfg = Config(
        backend="fake",
        runtime="local",
        repeats=2,
        requests=4,
        min_level_s=0.5,
        input_tokens=24,
        output_tokens=6,
        rates=(2.0, 8.0),
        concurrencies=(2,),
        warmup_requests=1,
        resamples=200,
    )
    outcome = run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    run_dir = outcome.run_dir
    assert validate_file(run_dir / "sweep.json") == [] and not outcome.failed
    doc = json.loads((run_dir / "sweep.json").read_text())
    order = [(a["label"], a["repeat"]) for a in doc["details"]["arm_runs"]]
    assert order == [
        ("rate=2/s", 1),
        ("rate=8/s", 1),
        ("closed c=2", 1),
        ("rate=2/s", 2),
        ("rate=8/s", 2),
        ("closed c=2", 2),
    ]  # no probe: the rates were given
    points = {p["label"]: p for p in doc["details"]["points"]}
    assert points["rate=2/s"]["offered_rps"] == 2.0 and points["closed c=2"]["concurrency"] == 2
    run = json.loads((run_dir / "run.json").read_text())
    assert doc["details"]["baseline"]["dtype"] == run["effective"]["dtype"] == "auto"  # not a CPU backend: the model's
    assert run["effective"]["dtype_source"] == "backend" and run["requested"]["dtype"] is None
    slow = points["rate=2/s"]
    assert slow["scheduled_rps"] > 0 and slow["verdict"] == ("invalid" if not slow["valid"] else slow["verdict"])
    assert points["closed c=2"]["verdict"] is None and "determined" in doc["details"]["saturation"]
    assert doc["details"]["baseline"]["saturation"] is None  # 4-request levels decide nothing: nothing to cite
    assert run["outputs"]["figures"] == ["latency_throughput.png"]
    assert doc["conclusion"]["decision"] == "inconclusive" and doc["kind"] == "sweep"


def test_the_probe_refills_until_its_steady_window_lasts_and_sets_the_ladder(bench_env):  # noqa: F811
    cfg = Config(
        backend="fake",
        runtime="local",
        repeats=1,
        requests=4,
        min_level_s=0.5,
        probe_s=1.0,
        probe_concurrency=2,
        rate_fractions=(0.5, 1.0),
        input_tokens=24,
        output_tokens=6,
        warmup_requests=1,
        resamples=200,
    )
    outcome = run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    doc = json.loads((outcome.run_dir / "sweep.json").read_text())
    labels = [a["label"] for a in doc["details"]["arm_runs"]]
    probe = doc["details"]["baseline"]["capacity_probe"]
    # the pilot (12 = 6 x concurrency requests) ends within a second here, so a longer one follows
    assert labels[0] == "probe" and (labels[1] == "probe (long)") == (probe["label"] == "probe (long)")
    assert probe["rps"] > 0 and probe["concurrency"] == 2
    if probe["label"] == "probe (long)":
        assert probe["requests"] > 12
    rates = sorted(p["offered_rps"] for p in doc["details"]["points"] if p["offered_rps"] is not None)
    assert rates[:2] == pytest.approx([round(0.5 * probe["rps"], 3), round(1.0 * probe["rps"], 3)])
    # the fake server keeps up with every level it can be sent, so rungs above the ladder were tried, 1.25 x each
    assert len(rates) <= 4
    assert all(high == pytest.approx(1.25 * low, rel=1e-3) for low, high in zip(rates[1:-1], rates[2:], strict=True))
    assert len(labels) <= SPEC.plan(cfg, None).schedule.phases[0].planned_steps  # the progress bound holds


def test_levels_above_the_first_that_falls_behind_are_not_run(monkeypatch):
    from types import SimpleNamespace

    from harness.bench.lib import sweep as sweep_mod
    from harness.bench.spec import History

    behind = {"rate=3/s"}  # what the stand-in reading says of each level once it ran
    monkeypatch.setattr(sweep_mod, "load_point", lambda runs, label, **_: SimpleNamespace(
        queue_verdict=sweep_mod.FALLS_BEHIND if label in behind else sweep_mod.KEEPS_UP))
    plan = SPEC.plan(Config(repeats=2, rates=(1.0, 2.0, 3.0, 4.0, 5.0), concurrencies=(2,)), None)
    history = History(cfg=None, model=None)
    ran = [(arm.label, repeat) for repeat, arm in plan.schedule.phases[0].steps(history)]
    assert ran == [("rate=1/s", 1), ("rate=2/s", 1), ("rate=3/s", 1), ("closed c=2", 1),
                   ("rate=1/s", 2), ("rate=2/s", 2), ("rate=3/s", 2), ("closed c=2", 2)]
    assert history.notes["skipped_levels"] == ["rate=4/s repeat 1", "rate=5/s repeat 1", "rate=4/s repeat 2",
                                               "rate=5/s repeat 2"]


@pytest.mark.parametrize(("behind", "expected"), [
    (set(), ["rate=2/s", "rate=4/s", "rate=5/s", "rate=6.25/s"]),  # none fell behind: two rungs more, then stop
    ({"rate=5/s"}, ["rate=2/s", "rate=4/s", "rate=5/s"]),  # the first rung more fell behind: the bracket is closed
    ({"rate=4/s"}, ["rate=2/s", "rate=4/s"]),  # the ladder's own top fell behind: nothing more
])
def test_a_ladder_none_of_whose_levels_falls_behind_runs_rungs_above_it_until_one_does(monkeypatch, behind, expected):
    from types import SimpleNamespace

    from harness.bench.lib import sweep as sweep_mod
    from harness.bench.spec import History

    def probed(self, history):  # a capacity probe that measured 4 req/s
        history.notes["capacity_probe"] = {"rps": 4.0}
        yield from ()

    monkeypatch.setattr(sweep_mod.LoadSweep, "probe", probed)
    monkeypatch.setattr(sweep_mod, "load_point", lambda runs, label, **_: SimpleNamespace(
        queue_verdict=sweep_mod.FALLS_BEHIND if label in behind else sweep_mod.UNDETERMINED))
    plan = SPEC.plan(Config(repeats=2, rate_fractions=(0.5, 1.0), input_tokens=24, output_tokens=6), None)
    history = History(cfg=None, model=None)
    ran = [(arm.label, repeat) for repeat, arm in plan.schedule.phases[0].steps(history)]
    assert ran == [(label, repeat) for repeat in (1, 2) for label in expected]  # the second round runs them too
    assert history.notes.get("extra_levels", []) == expected[2:]
    assert len(ran) <= plan.schedule.phases[0].planned_steps
    given = SPEC.plan(Config(rates=(2.0, 4.0), input_tokens=24, output_tokens=6), None)  # given rates: as given
    assert [arm.label for _, arm in given.schedule.phases[0].steps(History(cfg=None, model=None))] == [
        "rate=2/s", "rate=4/s"]


def test_an_invalid_level_whose_queue_grew_closes_the_ladder_but_never_the_bracket():
    """A stalled client invalidates a level; its queue still grew, so higher levels (or rungs above the ladder)
    would only queue more: they are not run, and the bracket reads undetermined, naming the invalid levels."""
    from harness.bench.lib.saturation import FALLS_BEHIND, INVALID, Level, QueueGrowth, Slope, bracket
    from harness.bench.lib.sweep import LoadPoint

    grew = QueueGrowth(2.0, 60.0, 120, Slope(0.2, 0.1, 0.3, 10), Slope(0.5, 0.4, 0.6, 10), FALLS_BEHIND)
    point = LoadPoint("rate=2/s", 2.0, None, 1, False, ("repeat 1: client event-loop lag",), 1.5, (1.5, 1.5),
                      10.0, (10.0, 10.0), scheduled_rps=2.0, growth=(grew,), verdict=INVALID)
    assert point.verdict == INVALID and point.queue_verdict == FALLS_BEHIND
    sat = bracket([Level("rate=1/s", 1.0, INVALID), Level("rate=2/s", 2.0, INVALID)])
    assert not sat.determined and "no level read fell behind and 2 invalid (rate=1/s, rate=2/s)" in sat.reason
    assert "below saturation" not in sat.reason
