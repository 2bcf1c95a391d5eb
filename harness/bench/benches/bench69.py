"""bench-69, INF-PREFIX-CACHE: does prefix caching cut TTFT when requests share a prefix?

Arms (same model, lengths, concurrency; the unique vs shared prefix paired contract):
  A  unique-prefix/cache-on   the twin workload: identical token lengths, nothing shared
  B  shared-prefix/cache-on   G groups of P prompts sharing an L-token prefix
  C  shared-prefix/cache-off  control: B's workload on a server with prefix caching off
A and B run interleaved (A B A B …) on one server; C runs on a second server
start (the engine flag needs a restart), so the C-vs-A effect is supporting,
not interleaved, evidence. The claim is B vs A on median TTFT; C must show no gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bench.metrics import (
    E2E_P50,
    OUTPUT_TOKENS_PER_S,
    PEAK_MEMORY_GIB,
    PREFIX_HIT_RATE,
    TPOT_P50,
    TTFT_P50,
    TTFT_P95,
)
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
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common

UNIQUE, SHARED, CONTROL = "unique-prefix/cache-on", "shared-prefix/cache-on", "shared-prefix/cache-off"


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for ≤ 5 minutes on 2 CPU cores once the serving env and model are cached."""

    groups: int = knob(2, "prefix groups G (multiplied by --scale)", min=1)
    prompts_per_group: int = knob(4, "prompts per group P", min=1)
    prefix_tokens: int = knob(1024, "shared prefix length L in tokens", min=1)
    suffix_tokens: int = knob(32, "per-request suffix length in tokens", min=1)
    output_tokens: int = knob(16, "generated tokens per request (ignore_eos)", min=1)
    concurrency: int = knob(1, "closed-loop concurrency", min=1)
    control: bool = knob(True, "run the shared-prefix cache-off control arm")

    def check(self) -> None:
        if self.prefix_tokens + self.suffix_tokens + self.output_tokens > self.max_model_len:
            raise InvalidInput(f"prefix + suffix + output tokens exceed --max-model-len {self.max_model_len}")


def plan(cfg: Config, model: PreparedModel) -> Plan:
    common = Common(arrival=Arrival("closed", concurrency=cfg.concurrency), seed=cfg.seed,
                    input_tokens=cfg.prefix_tokens + cfg.suffix_tokens, output_tokens=cfg.output_tokens)
    shape = {"groups": cfg.groups * cfg.scale, "prompts_per_group": cfg.prompts_per_group,
             "prefix_tokens": cfg.prefix_tokens, "suffix_tokens": cfg.suffix_tokens}
    workloads = [WorkloadPlan("shared-prefix", "shared-prefix", common, shape),
                 WorkloadPlan("unique-prefix", "unique-prefix", common, shape)]
    servers = [ServerVariant("cache-on", {"prefix_caching": True})]
    arms = [Arm(UNIQUE, "unique-prefix", "cache-on"), Arm(SHARED, "shared-prefix", "cache-on")]
    controls = []
    if cfg.control:
        servers.append(ServerVariant("cache-off", {"prefix_caching": False}))
        arms.append(Arm(CONTROL, "shared-prefix", "cache-off"))
        controls.append(Claim(TTFT_P50, UNIQUE, CONTROL, name="cache-off"))
    return Plan(workloads=tuple(workloads), servers=tuple(servers), arms=tuple(arms),
                schedule=phases_for(arms, cfg.repeats, "sequential"),
                claims=(Claim(TTFT_P50, UNIQUE, SHARED),), controls=tuple(controls), run_label=f"{SHARED} vs {UNIQUE}",
                columns=(TTFT_P50, TTFT_P95, TPOT_P50, E2E_P50, OUTPUT_TOKENS_PER_S, PREFIX_HIT_RATE, PEAK_MEMORY_GIB),
                notes=("warm-up requests use their own workload and are not measured",
                       "the prefix cache is reset before every arm run"))


SPEC = BenchSpec(
    name="69", semantic_id="INF-PREFIX-CACHE", question="does prefix reuse cut TTFT?", config=Config, plan=plan,
    next_steps={
        "adopt": "keep prefix caching on for shared-prefix traffic; confirm on the GPU image (make bench-69 GPU=0)",
        "reject": "prefix caching slowed TTFT here: check the hit rates and server logs before trusting it",
        "vetoed": "the cache-off control also got faster: check that the workloads are true twins",
    },
)
