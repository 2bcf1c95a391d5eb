"""A fresh arrival realisation per repeat (``harness.bench.realisation``): paired across the arms of a repeat,
different across repeats, one file for a closed loop; through the runner, run.json lists every file and the
protocol says which repeat replayed which."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from harness.bench import runner as runner_mod
from harness.bench.benches import bench69
from harness.bench.metrics import TTFT_P50
from harness.bench.realisation import arrival_seed, realised
from harness.bench.spec import Arm, BenchSpec, Claim, Plan, ServerVariant, WorkloadPlan, phases_for
from harness.models import PreparedModel
from harness.progress import Reporter
from harness.workload import Arrival, Common, load_workload, make_workload
from harness.workload.arrival import offsets, scheduled
from tests.bench.test_bench_runner import Config, bench_env  # noqa: F401  (fixture: the stand-in engine as "fake")

POISSON = Arrival("poisson", rate_rps=40.0)


def schedule(plan: WorkloadPlan, tokenizer_dir) -> tuple[list[float | None], list[tuple[int, int]]]:
    made = make_workload(plan.kind, plan.common, dict(plan.options), tokenizer_dir)
    return [r.offset_s for r in made.requests], [(r.input_tokens, r.output_tokens) for r in made.requests]


def timed_twins(tokenizer_dir) -> list[WorkloadPlan]:
    """bench-69's shared/unique-prefix twins, small, on Poisson arrivals instead of its closed loop."""
    cfg = bench69.Config(groups=2, prompts_per_group=3, prefix_tokens=16, suffix_tokens=8, output_tokens=4)
    model = PreparedModel(key="tiny", name="tiny-bpe", path=tokenizer_dir, gguf_sha256="sha256:" + "0" * 64,
                          checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)
    twins = [w for w in bench69.plan(cfg, model).workloads if w.kind in ("shared-prefix", "unique-prefix")]
    assert len(twins) == 2
    return [dataclasses.replace(w, common=dataclasses.replace(w.common, arrival=POISSON)) for w in twins]


def test_twins_of_one_repeat_share_arrivals_and_lengths_and_repeats_differ(tokenizer_dir):
    shared, unique = timed_twins(tokenizer_dir)
    by_repeat = {}
    for repeat in (1, 2, 3):
        a, b = schedule(realised(shared, repeat), tokenizer_dir), schedule(realised(unique, repeat), tokenizer_dir)
        assert a == b  # the twin contract, per repeat: identical arrival times and token lengths
        by_repeat[repeat] = a
    offsets = [by_repeat[r][0] for r in (1, 2, 3)]
    assert len({tuple(o) for o in offsets}) == 3  # each repeat its own draw
    assert len({tuple(by_repeat[r][1]) for r in (1, 2, 3)}) == 1  # prompts and lengths unchanged
    assert realised(shared, 1) is shared  # repeat 1 is the workload itself
    assert realised(shared, 2).name == "shared-prefix-r2"
    assert realised(shared, 2).common.seeds["arrival"] == arrival_seed(shared.common.seed_for("arrival"), 2)
    assert realised(shared, 2, enabled=False) is shared


@pytest.mark.parametrize("nominal", [Arrival("poisson", rate_rps=1.0), Arrival("gamma", rate_rps=1.0, burstiness=0.5)])
def test_every_repeats_redraw_is_scheduled_at_the_lists_rate(tokenizer_dir, nominal):
    n, seed = 100, 11
    common = Common(arrival=scheduled(nominal, n, seed + 2), seed=seed, requests=n, input_tokens=4, output_tokens=2)
    plan = WorkloadPlan("timed", "random", common)
    lists = [schedule(realised(plan, repeat), tokenizer_dir)[0] for repeat in range(1, 6)]
    for sends in lists:
        assert (n - 1) / sends[-1] == pytest.approx(nominal.rate_rps, rel=1e-3)
    assert len({tuple(sends) for sends in lists}) == 5  # each repeat its own draw
    unscheduled = [offsets(plan.common.arrival, n, arrival_seed(seed + 2, r))[-1] for r in range(2, 6)]
    assert max(abs((n - 1) / s - 1.0) for s in unscheduled) > 0.05  # the redraws' own spans are off by chance


def test_closed_loops_constant_rates_and_traces_keep_one_realisation():
    for arrival in (Arrival("closed", concurrency=2), Arrival("constant", rate_rps=5.0), Arrival("trace")):
        plan = WorkloadPlan("w", "random", Common(arrival=arrival, requests=3))
        assert realised(plan, 4) is plan
    assert 0 <= arrival_seed(2, 5) < 2**63 and arrival_seed(2, 5) != arrival_seed(2, 6) != arrival_seed(3, 6)


def timed_plan(cfg: Config, model) -> Plan:
    timed = Common(arrival=POISSON, seed=cfg.seed, requests=cfg.requests, input_tokens=24, output_tokens=6)
    closed = dataclasses.replace(timed, arrival=Arrival("closed", concurrency=2))
    servers = (ServerVariant("fast", {"extra_args": ("--ttft-ms", "5")}),)
    arms = (Arm("a", "timed", "fast"), Arm("b", "timed", "fast"), Arm("c", "closed", "fast"))
    return Plan(workloads=(WorkloadPlan("timed", "random", timed), WorkloadPlan("closed", "random", closed)),
                servers=servers, arms=arms, schedule=phases_for(arms, cfg.repeats), warmup=None,
                claims=(Claim(TTFT_P50, "a", "b"),), fresh_arrivals=cfg.order != "sequential")


SPEC = BenchSpec(name="98", semantic_id="INF-TEST-REALISE", question="one draw per repeat?", config=Config,
                 plan=timed_plan, next_steps={})


def run(root, order: str):
    cfg = Config(backend="fake", runtime="local", repeats=3, requests=4, warmup_requests=0, resamples=100,
                 order=order, sign=False)
    return runner_mod.run_bench(SPEC, cfg, root=root, reporter=Reporter(io.StringIO(), every_s=60))


@pytest.mark.usefixtures("bench_env")
def test_the_runner_replays_each_repeats_own_draw_and_records_which(tmp_path):
    outcome = run(tmp_path, "concurrent")
    details = outcome.result["details"]
    files = details["workloads"]
    assert sorted(files) == ["closed", "timed", "timed-r2", "timed-r3"]
    run_json = json.loads((outcome.run_dir / "run.json").read_text())
    assert sorted(run_json["workload_ids"]) == sorted({f["workload_id"] for f in files.values()})
    used = details["protocol"]["arrival_realisations"]
    assert len(used) == 9 and details["protocol"]["fresh_arrivals_per_repeat"] is True
    for entry in used:
        want = "closed" if entry["arm"] == "c" else "timed" if entry["repeat"] == 1 else f"timed-r{entry['repeat']}"
        assert entry["realisation"] == want and entry["workload_id"] == files[want]["workload_id"]
        assert entry["drawn_per_repeat"] is (entry["arm"] != "c")
    offsets = {name: [r.offset_s for r in load_workload(outcome.run_dir / f["path"]).requests]
               for name, f in files.items() if name.startswith("timed")}
    assert len({tuple(v) for v in offsets.values()}) == 3
    runs = {(r["label"], r["repeat"]): r["workload"] for r in details["arm_runs"]}
    assert runs[("a", 2)] == runs[("b", 2)] == "timed-r2" and runs[("c", 3)] == "closed"


@pytest.mark.usefixtures("bench_env")
def test_a_plan_that_opts_out_replays_one_draw(tmp_path):
    outcome = run(tmp_path, "sequential")  # this spec opts out in sequential order
    assert sorted(outcome.result["details"]["workloads"]) == ["closed", "timed"]
    assert {e["realisation"] for e in outcome.result["details"]["protocol"]["arrival_realisations"]} == {
        "closed", "timed"}
