"""bench-98 INF-EXAMPLE: does a larger running-request limit cut median TTFT under a closed loop of 4?

The example of docs/benches.md, kept as a file so that a test runs it: two server variants, their arms
alternating starts, one claim with a stated metric. The framework derives the warm-up, the protocol
sentence, the title and this doc.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bench.metrics import TTFT_P50
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    Plan,
    ServerVariant,
    WorkloadPlan,
    phases_for,
)
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common


@dataclass(frozen=True)
class Config(BenchConfig):
    prompts: int = knob(8, "requests per arm (multiplied by --scale)", min=1, max=10_000)
    seqs: int = knob(4, "max_num_seqs of the treatment variant", min=2, max=1024)


def plan(cfg: Config, model: PreparedModel) -> Plan:
    common = Common(Arrival("closed", concurrency=4), seed=cfg.seed, requests=cfg.prompts * cfg.scale,
                    input_tokens=32, output_tokens=8)
    servers = (ServerVariant("one", {"max_num_seqs": 1}), ServerVariant("many", {"max_num_seqs": cfg.seqs}))
    arms = (Arm("one", "main", "one"), Arm("many", "main", "many"))
    return Plan(workloads=(WorkloadPlan("main", "random", common),), servers=servers, arms=arms,
                schedule=phases_for(arms, cfg.repeats, "alternate"), claims=(Claim(TTFT_P50, "one", "many"),))


SPEC = BenchSpec(name="98", semantic_id="INF-EXAMPLE", question="does a larger running-request limit cut TTFT?",
                 config=Config, plan=plan, next_steps={"adopt": "raise max_num_seqs for this traffic"})
