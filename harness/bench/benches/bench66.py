"""bench-66, INF-FLOAT-BASELINE: what does this model on this backend deliver as load grows?

One fixed request list (exact token counts, one seed) is replayed at a sweep of
load levels on one server start: Poisson rates from light load to past saturation
(by default fractions of a capacity probe — the same list in a closed loop at
--probe-concurrency — so the ladder fits the machine; or --rates), plus optional
closed-loop concurrencies. Every level is repeated (rounds low → high, R times).
The model is served in its float dtype (bf16 on the CPU default; recorded).

Read: per level, achieved vs offered throughput and TTFT/TPOT/E2E P50/P99; a level
where the client could not keep its schedule is marked invalid and not read as the
server's. The saturation point is the highest valid rate whose achieved request
rate is within --tolerance of offered and whose P99 TTFT stays under
--ttft-factor × the lightest level's. Later benches cite this run's manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bench.lib.sweep import LoadSweep
from harness.bench.metrics import (
    E2E_P50,
    E2E_P99,
    OUTPUT_TOKENS_PER_S,
    REQUEST_RATE,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
)
from harness.bench.spec import (
    BenchConfig,
    BenchSpec,
    Phase,
    Plan,
    Schedule,
    ServerVariant,
)
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for ≤ 10 minutes on 2 CPU cores once the serving env and model are cached."""

    requests: int = knob(16, "requests in the fixed list (x --scale); every level replays the same list", min=2)
    input_tokens: int = knob(256, "mean prompt length in tokens", min=1)
    output_tokens: int = knob(32, "mean generated tokens per request (ignore_eos: exact)", min=2)
    length_range: float = knob(0.25, "prompt and output lengths uniform in [N(1-r), N(1+r)]", min=0, max=0.9)
    rates: tuple[float, ...] = knob((), "Poisson rates in req/s (empty: --rate-fractions of the probed capacity)")
    rate_fractions: tuple[float, ...] = knob((0.25, 0.5, 0.75, 1.0, 1.25), "load levels as fractions of the "
                                             "probed capacity", min=0.01)
    concurrencies: tuple[int, ...] = knob((), "closed-loop concurrency levels added to the sweep", min=1)
    probe_concurrency: int = knob(16, "closed-loop concurrency of the capacity probe", min=1)
    dtype: str = knob("bfloat16", "served dtype (recorded)", choices=("bfloat16", "float16", "float32", "auto"))
    tolerance: float = knob(0.10, "saturation rule: achieved req/s within this fraction of offered", min=0, max=1)
    ttft_factor: float = knob(3.0, "saturation rule: P99 TTFT at most this multiple of the lightest level's", min=1)

    def check(self) -> None:
        if any(r <= 0 for r in self.rates):
            raise InvalidInput("--rates must all be > 0 requests per second")
        if self.input_tokens * (1 + self.length_range) + self.output_tokens * (1 + self.length_range) > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output exceeds --max-model-len {self.max_model_len}")


def request_list(cfg: Config, seed: int) -> Common:
    """The one request list: same seeds, same lengths and prompts; only the arrival differs per level."""
    return Common(arrival=Arrival("closed", concurrency=1), seed=seed, requests=cfg.requests * cfg.scale,
                  input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens, input_range=cfg.length_range,
                  output_range=cfg.length_range)


def plan(cfg: Config, model: PreparedModel) -> Plan:
    sweep = LoadSweep(request_list(cfg, cfg.seed), "baseline", cfg.repeats, cfg.rates, cfg.rate_fractions,
                      cfg.concurrencies, cfg.probe_concurrency, cfg.tolerance, cfg.ttft_factor,
                      label=f"{cfg.dtype} baseline", facts=(("dtype", cfg.dtype),),
                      title=f"bench-66 INF-FLOAT-BASELINE ({cfg.dtype}): latency vs throughput")
    phase = Phase("sweep", ("baseline",), sweep.steps, planned_steps=sweep.planned_steps)
    return Plan(workloads=(), servers=(ServerVariant("baseline", {"dtype": cfg.dtype}),), arms=(),
                schedule=Schedule((phase,), "one server start; load levels in rounds low to high, repeated"),
                read=sweep.read, warmup=request_list(cfg, cfg.seed),
                run_label=f"{cfg.dtype} latency-throughput sweep",
                columns=(TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, E2E_P50, E2E_P99, REQUEST_RATE, OUTPUT_TOKENS_PER_S),
                notes=("every level replays the same request list (same seeds); only the arrival process differs",
                       "the capacity probe is the same list in a closed loop; its achieved rate sets the ladder"))


SPEC = BenchSpec(
    name="66", semantic_id="INF-FLOAT-BASELINE",
    question="what does this model on this backend deliver as load grows?", config=Config, plan=plan,
    outputs=("latency_throughput.png",),
    next_steps={
        "inconclusive": "cite this run's manifest as the baseline of later benches; rerun with RATES=... around the "
                        "saturation point for a finer curve",
    },
)
