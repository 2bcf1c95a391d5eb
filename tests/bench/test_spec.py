"""The spec API carries what every bench used to repeat: the warm-up, the protocol sentence, title and doc, and
next-step keys that cannot be misspelt."""

from __future__ import annotations

import pytest

from harness.bench import bench_specs
from harness.bench.spec import (
    AUTO,
    WARMUP,
    Arm,
    BenchSpec,
    Plan,
    ServerVariant,
    WorkloadPlan,
    phases_for,
)
from harness.workload import Arrival, Common

MAIN = Common(arrival=Arrival("poisson", rate_rps=2.0), seed=7, requests=12, input_tokens=96, output_tokens=12,
              input_range=0.5)


MAIN_PLAN = WorkloadPlan("main", "random", MAIN)


def plan_with(warmup=AUTO, workloads=(MAIN_PLAN,)) -> Plan:
    arms = (Arm("a", "main", "s"), Arm("b", "main", "s"))
    return Plan(workloads=workloads, servers=(ServerVariant("s"),), arms=arms, schedule=phases_for(arms, 2),
                claims=(), read=lambda h: None, warmup=warmup)


def test_the_warm_up_is_derived_from_the_first_measured_workload_on_its_own_seed():
    plan = plan_with().with_warmup(3, seed=7)
    warm = plan.workloads[-1]
    assert plan.warmup_name == WARMUP and warm.name == WARMUP and not warm.measured and warm.kind == "random"
    assert warm.common.requests == 3 and warm.common.seed == 7 + 10_000  # never the measured prompts
    assert (warm.common.input_tokens, warm.common.output_tokens, warm.common.input_range) == (96, 12, 0.5)
    assert warm.common.arrival == Arrival("closed", concurrency=1)
    plan.check()


def test_no_warm_up_when_asked_for_none_or_opted_out():
    assert plan_with().with_warmup(0, seed=0).warmup_name is None
    opted_out = plan_with(warmup=None).with_warmup(3, seed=0)
    assert opted_out.warmup_name is None and len(opted_out.workloads) == 1


def test_a_request_shape_or_a_named_workload_gives_the_warm_up():
    shaped = plan_with(warmup=MAIN, workloads=()).with_warmup(2, seed=1)
    assert shaped.warmup_name == WARMUP and shaped.workloads[0].common.input_tokens == 96
    own = WorkloadPlan("mine", "random", MAIN, measured=False)
    named = plan_with(warmup="mine", workloads=(WorkloadPlan("main", "random", MAIN), own)).with_warmup(2, seed=1)
    assert named.warmup_name == "mine" and len(named.workloads) == 2


def test_the_schedule_carries_its_protocol_sentence_into_the_plan():
    arms = [Arm("a", "w", "s1"), Arm("c", "w", "s2")]
    schedule = phases_for(arms, 2, "alternate")
    plan = Plan(workloads=(), servers=(), arms=tuple(arms), schedule=schedule, read=lambda h: None)
    assert plan.order == schedule.protocol and plan.phases == schedule.phases


def test_a_misspelt_next_step_key_fails_when_the_spec_is_made():
    with pytest.raises(ValueError, match=r"next_steps keys \['adpot'\] are not decisions"):
        BenchSpec(name="98", semantic_id="X", question="?", config=object, plan=lambda c, m: None,  # type: ignore
                  next_steps={"adpot": "typo"})


def test_title_and_doc_are_derived_for_every_bench():
    for name, spec in bench_specs().items():
        assert spec.title == f"bench-{name} {spec.semantic_id}"
        assert spec.doc.startswith(f"bench-{name}"), (name, spec.doc[:40])
