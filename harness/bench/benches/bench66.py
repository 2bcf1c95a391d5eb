"""bench-66, INF-FLOAT-BASELINE: what does this model on this backend deliver as load grows?

A sustained closed-loop capacity probe (the request list at --probe-concurrency, refilling, its steady-state
window >= --probe-s; lengthened once when the first list ends too soon) sets a ladder of Poisson rates
(--rate-fractions of that capacity, or --rates), plus optional closed-loop concurrencies, on one server start.
Each timed level's list is sized by duration: arrivals spanning >= --min-level-s and >= --requests requests
(same seeds: every list starts with the same requests). The model is served in the host-aware dtype (bf16 with
native bf16 on the CPU, else fp32; recorded with its reason); requests are short by default (128 prompt, 16
output tokens at the reference size, half that at SIZE=quick) so the sweep fits its time target on the CPU default.

Read: per level, the scheduled rate (what the arrivals actually had), achieved throughput, TTFT/TPOT/E2E
P50/P99, and queue growth: the slopes of TTFT and of the backlog over the level's time, each with a 95 %
interval. A level keeps up when both intervals lie at or below --tolerance (the share of the offered load left
queued), falls behind when either, or the slope of E2E, lies above. The saturation point is a bracket [last level
that kept up, first that fell behind] over the levels read (an invalid level is unread, except one only sent late
whose queue still grew: it closes the bracket from above); later benches cite this run's manifest and fall back
to their own probe when its bracket is undetermined.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bench.lib.hostprofile import request_shape as request_shape_here
from harness.bench.lib.saturation import MIN_VERDICT_REQUESTS
from harness.bench.lib.sweep import RATE_FRACTIONS, LoadSweep
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

REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS = 128, 16
MIN_OUTPUT_TOKENS = 8


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for ≤ 10 minutes on 2 CPU cores once the serving env and model are cached."""

    repeats: int = knob(1, "repeats of every level (each level is already >= --min-level-s of arrivals; "
                         "< 3 gives single evidence)", min=1)
    requests: int = knob(100, "fewest requests of a timed level (x --scale); its list is lengthened to span "
                         f"--min-level-s (a level of fewer than {MIN_VERDICT_REQUESTS} gets no verdict)", min=2)
    min_level_s: float = knob(60.0, "a timed level's arrivals span at least this many seconds", min=0.1,
                              group="protocol")
    probe_s: float = knob(60.0, "the capacity probe's steady-state window lasts at least this many seconds", min=0.1,
                          group="protocol")
    input_tokens: int | None = knob(None, f"mean prompt length in tokens (default: {REFERENCE_INPUT_TOKENS} at the "
                                    "reference size, in proportion to the output at a smaller --size)", min=1)
    output_tokens: int | None = knob(None, f"mean generated tokens per request (ignore_eos: exact; default: "
                                     f"{REFERENCE_OUTPUT_TOKENS} at the reference size, fewer at a smaller --size, "
                                     f"at least {MIN_OUTPUT_TOKENS})", min=2)
    length_range: float = knob(0.25, "prompt and output lengths uniform in [N(1-r), N(1+r)]", min=0, max=0.9)
    rates: tuple[float, ...] = knob((), "Poisson rates in req/s (empty: --rate-fractions of the probed capacity)")
    rate_fractions: tuple[float, ...] = knob(RATE_FRACTIONS, "load levels as fractions of the probed capacity "
                                             "(levels above the first that falls behind are not run)", min=0.01)
    concurrencies: tuple[int, ...] = knob((), "closed-loop concurrency levels added to the sweep", min=1)
    probe_concurrency: int = knob(8, "closed-loop concurrency of the capacity probe", min=1, group="protocol")
    tolerance: float = knob(0.05, "queue-growth rule: largest share of the offered load a level that keeps up may "
                            "leave queued (TTFT slope in s/s, backlog slope / rate)", min=0.001, max=1)

    def check(self) -> None:
        if any(r <= 0 for r in self.rates):
            raise InvalidInput("--rates must all be > 0 requests per second")
        # unset lengths are bounded by the reference host's, the longest the defaults can be
        longest = ((self.input_tokens or REFERENCE_INPUT_TOKENS) + (self.output_tokens or REFERENCE_OUTPUT_TOKENS)) * (
            1 + self.length_range)
        if longest > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output exceeds --max-model-len {self.max_model_len}")


def request_shape(cfg: Config) -> tuple[int, int, str]:
    """Mean prompt and output tokens, and why: as set, else the reference host's, both scaled by the named size's
    factor (``sized_shape``)."""
    return request_shape_here(cfg.input_tokens, cfg.output_tokens, (REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS),
                              cfg.size, floor=MIN_OUTPUT_TOKENS)


def request_list(cfg: Config, seed: int, shape: tuple[int, int]) -> Common:
    """The one request list: same seeds, same lengths and prompts; only the arrival differs per level."""
    return Common(
        arrival=Arrival("closed", concurrency=1),
        seed=seed,
        requests=cfg.requests * cfg.scale,
        input_tokens=shape[0],
        output_tokens=shape[1],
        input_range=cfg.length_range,
        output_range=cfg.length_range,
    )


def plan(cfg: Config, model: PreparedModel) -> Plan:
    named = f"{cfg.dtype} " if cfg.dtype else ""  # else the host-aware dtype, recorded in run.json
    prompt, output, shape_why = request_shape(cfg)
    shape = (prompt, output)
    sweep = LoadSweep(
        request_list(cfg, cfg.seed, shape),
        "baseline",
        cfg.repeats,
        cfg.rates,
        cfg.rate_fractions,
        cfg.concurrencies,
        cfg.probe_concurrency,
        cfg.tolerance,
        min_level_s=cfg.min_level_s,
        min_level_requests=cfg.requests * cfg.scale,
        probe_s=cfg.probe_s,
        label=f"{named}baseline",
        facts=(("dtype", cfg.dtype),),
        title=f"bench-66 INF-FLOAT-BASELINE: {named}latency vs throughput",
    )
    phase = Phase("sweep", ("baseline",), sweep.steps, planned_steps=sweep.planned_steps)
    server = ServerVariant("baseline", {"dtype": cfg.dtype} if cfg.dtype else {})
    return Plan(
        workloads=(),
        servers=(server,),
        arms=(),
        schedule=Schedule((phase,), "one server start; load levels in rounds low to high, repeated"),
        read=sweep.read,
        warmup=request_list(cfg, cfg.seed, shape),
        run_label=f"{named}latency-throughput sweep",
        columns=(TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, E2E_P50, E2E_P99, REQUEST_RATE, OUTPUT_TOKENS_PER_S),
        notes=(
            f"request lengths: {shape_why}",
            "every level's list has the same seeds (its first requests are the same); its length follows "
            "its rate so its arrivals span --min-level-s",
            "the capacity probe is the list in a refilling closed loop; its steady-state completion rate "
            "sets the ladder",
        ),
    )


SPEC = BenchSpec(
    name="66",
    semantic_id="INF-FLOAT-BASELINE",
    question="what does this model on this backend deliver as load grows?",
    config=Config,
    plan=plan,
    outputs=("latency_throughput.png",),
    next_steps={
        "inconclusive": "cite this run's manifest as the baseline of later benches; rerun with RATES=... inside the "
        "saturation bracket for a narrower one (an undetermined bracket cannot be cited)",
    },
)
