"""What the resolution step refuses before anything starts, and what a run that measured nothing leaves behind."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from harness.bench import runner as runner_mod
from harness.bench.spec import Arm, BenchSpec, Plan, ServerVariant, WorkloadPlan, phases_for
from harness.errors import InvalidInput
from harness.progress import Reporter
from harness.workload import Arrival, Common
from tests.bench.test_bench_runner import SPEC, Config, bench_env  # noqa: F401 - the fixture and the fake bench


def only_optional(cfg: Config, model) -> Plan:
    """One optional variant whose engine refuses to start: no arm can complete."""
    common = Common(arrival=Arrival("closed", concurrency=1), seed=cfg.seed, requests=2, input_tokens=24,
                    output_tokens=4)
    arms = (Arm("exotic", "main", "exotic"),)
    servers = (ServerVariant("exotic", {"extra_args": ("--refuse", "method 'eagle' is not supported on cpu")},
                             optional=True),)
    return Plan(workloads=(WorkloadPlan("main", "random", common),), servers=servers, arms=arms,
                schedule=phases_for(arms, 1), warmup=None, claims=(), read=lambda history: None)


def test_a_run_whose_every_server_refused_to_start_is_kept_as_failed_with_its_logs(bench_env):  # noqa: F811
    spec = replace(SPEC, plan=only_optional)
    cfg = Config(backend="fake", runtime="local", repeats=1, resamples=300)
    with pytest.raises(InvalidInput, match="no arm completed a run"):
        runner_mod.run_bench(spec, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    (run_dir,) = list((bench_env / "runs" / "99").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and "no arm completed a run" in record["effective"]["error"]
    assert "method 'eagle' is not supported on cpu" in (run_dir / "servers" / "server-exotic.log").read_text()


def test_a_run_whose_every_variant_is_refused_before_a_start_is_one_line_before_anything(bench_env,  # noqa: F811
                                                                                           monkeypatch):
    from harness.bench import resolve as resolve_mod

    def refuse_all(plan, given, placement, base, backend_of):
        return plan, {v.name: "no device offered here" for v in plan.servers}

    monkeypatch.setattr(resolve_mod, "prepare_started", refuse_all)
    spec: BenchSpec = replace(SPEC, plan=only_optional)
    with pytest.raises(InvalidInput, match="bench-99: no server variant can run here .exotic: no device offered"):
        runner_mod.run_bench(spec, Config(backend="fake", runtime="local", repeats=1), root=bench_env,
                             reporter=Reporter(io.StringIO(), every_s=60))
    assert not (bench_env / "runs").exists()
