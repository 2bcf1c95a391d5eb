"""bench-72, INF-SINGLE-GPU-DEPLOY: what should one device run, and up to what load?

Candidates are server variants: on the CPU default, dtype x max_num_seqs x KV-cache space
(one factor at a time around the first values, or --full-grid); on a GPU, backend (vLLM,
SGLang) x max_num_seqs x quantization, each with the same KV pool (--gpu-kv-pool-gib,
mapped to vLLM's gpu_memory_utilization and SGLang's --mem-fraction-static; the mapping
is recorded). SLOs: a named absolute tier (--slo-tier: cpu-server on the CPU default, server on a GPU, from
MLPerf's scenarios; bench72/tiers.py), an explicit --slo-ttft-p99-ms / --slo-tpot-p99-ms, or on request limits
scaled from a light-load P99 (--slo-tier relative); plus an error-rate limit.

Per candidate, one server start and the same probe schedule: Poisson rates start x growth^k around one start rate
(--start-rps, bench-66's saturation point, or a light-load probe's rate), low to high, stopping after two probes in
a row broke a limit. Capacity is fitted from every probe (bench/lib/capacity_fit.py) with a resampled interval;
overlapping intervals are a tie and the tie is the decision. A candidate whose numerics differ from the highest-
precision candidate's passes the greedy-agreement gate against it first (bench72/gate.py). A leader standing alone
then duels the runner-up, the two interleaved over the repeats just inside its capacity. On the CPU the best
candidate so far stays up, so the duel runs on live servers; on a GPU one engine runs at a time (the KV pool
mapping assumes an engine alone on its device) and the duel restarts them in turn. Progress counts against the
schedule's bound.
Read: the decision record (harness/bench/benches/bench72/decision.py states the rule).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.backends.host_dtype import CPU_BACKENDS, choose_dtype
from harness.bench.benches.bench72.candidates import cpu_candidates, gpu_candidates, parameter_count
from harness.bench.benches.bench72.capacity import Campaign
from harness.bench.benches.bench72.decision import deployment_reading, numerics_gates
from harness.bench.benches.bench72.slo import LightLoad, cited_light_load
from harness.bench.benches.bench72.tiers import CHOICES as TIER_CHOICES
from harness.bench.benches.bench72.tiers import default_tier
from harness.bench.devices import alone
from harness.bench.lib.citations import Citation
from harness.bench.lib.exceedance import MAX_CLAIM, claim_level, needed_requests
from harness.bench.lib.gpuload import carried_rate, cited_bench66, cited_shape
from harness.bench.lib.hostprofile import request_cost_ratio
from harness.bench.metrics import E2E_P99, PEAK_MEMORY_GIB, REQUEST_RATE, TPOT_P99, TTFT_P99
from harness.bench.placement import Placement, planning_only, resolve_placement
from harness.bench.spec import BenchConfig, BenchSpec, Phase, Plan, Schedule
from harness.contract.result import Result
from harness.errors import CapabilityMissing, InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.rundir.fingerprint import host_isa
from harness.runtime.gpus import memory_total_bytes, parse_gpus
from harness.workload import Arrival

DTYPES = ("bfloat16", "float32", "float16", "auto")


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for <= 15 minutes on 2 CPU cores once the serving env and model are cached."""

    kv_cache_space_gib: int = knob(2, "unused: each candidate sets its own (--kv-cache-values-gib)", min=1, cli=False)
    requests: int = knob(12, "requests per probe (x --scale); every probe replays the same list, "
                         "lengthened to --probe-seconds of arrivals", min=4)
    probe_seconds: float = knob(10.0, "a probe's arrivals span at least this long: it holds --requests, or as many "
                                "as its own Poisson draws need to span this, so a rate passes by being served, not by "
                                "absorbing a burst", min=0, group="protocol")
    confirm_s: float = knob(0.0, "a confirming run at the deploy point: the best qualifying candidate replayed at its "
                            "certified rate with arrivals spanning this many seconds, read as one more exceedance "
                            "count (held or not held); 0: off", min=0, group="protocol")
    light_requests: int = knob(8, "requests of the light-load probe (one at a time) when no bench-66 run is cited",
                               min=2, group="protocol")
    input_tokens: int = knob(256, "mean prompt length in tokens (a cited bench-66 rate is carried to this "
                             "shape)", min=1)
    output_tokens: int = knob(32, "mean generated tokens per request (ignore_eos: exact)", min=2)
    length_range: float = knob(0.25, "prompt and output lengths uniform in [N(1-r), N(1+r)]", min=0, max=0.9)
    dtypes: tuple[str, ...] = knob((), "candidate dtypes, the first the base (default: on the CPU default the dtype "
                                   "this host serves, bfloat16 only with native bf16, or --dtype, then the other; on "
                                   "a GPU bfloat16)", choices=DTYPES)
    max_num_seqs_values: tuple[int, ...] = knob((16, 4), "candidate max_num_seqs values (the first is the base)", min=1)
    kv_cache_values_gib: tuple[int, ...] = knob((2, 1), "CPU: candidate KV-cache sizes in GiB", min=1)
    full_grid: bool = knob(False, "every combination instead of one factor at a time around the base")
    backends: tuple[str, ...] = knob(("vllm", "sglang"), "GPU: candidate backends", choices=("vllm", "sglang"))
    quantizations: tuple[str, ...] = knob(("fp8",), "GPU: quantized candidates (online; optional; '' for none)",
                                          choices=("fp8",), empty=True)
    gpu_kv_pool_gib: float = knob(8.0, "GPU: the KV pool every candidate gets, in GiB", min=0.1, group="protocol")
    gpu_activation_gib: float = knob(2.0, "GPU: vLLM's activation reserve inside its budget (mapping estimate)", min=0,
                                     group="protocol")
    gpu_in_use_gib: float = knob(1.0, "GPU: memory in use before SGLang loads, e.g. the CUDA context", min=0,
                                 group="protocol")
    baseline: str = knob("latest", "bench-66 manifest whose saturation point centres the probe schedule (and, "
                         "with --slo-tier relative, scales the SLOs): a path, latest or none",
                         cites="INF-FLOAT-BASELINE")
    slo_tier: str = knob("auto", "named absolute SLO tier (auto: cpu-server on the CPU default, server on a GPU); "
                         "relative: limits scaled from a light-load P99", choices=TIER_CHOICES)
    slo_ttft_p99_ms: float | None = knob(None, "P99 TTFT limit in ms (unset: the tier's)", min=1)
    slo_tpot_p99_ms: float | None = knob(None, "P99 TPOT limit in ms (unset: the tier's)", min=0.1)
    slo_ttft_factor: float = knob(3.0, "--slo-tier relative: P99 TTFT limit = this x the light-load median TTFT "
                                  "(>= 100 unqueued requests)", min=1)
    slo_tpot_factor: float = knob(2.0, "--slo-tier relative: P99 TPOT limit = this x the light-load median TPOT",
                                  min=1)
    slo_error_rate: float = knob(0.01, "largest share of requests that may fail in a passing probe", min=0, max=1)
    start_rps: float | None = knob(None, "centre of the probe schedule (unset: bench-66's saturation point or the "
                                   "light probe's rate)", min=0.001)
    growth: float = knob(2.0, "factor between neighbouring rates of the probe schedule", min=1.1, group="protocol")
    schedule_below: int = knob(1, "schedule rates below its centre (start / growth^k)", min=0, group="protocol")
    schedule_extend_below: int = knob(2, "rungs added below the schedule (each its lowest / growth, not under "
                                      "--min-rps) while the first candidate breaks a limit at its lowest: every "
                                      "candidate then gets them", min=0, group="protocol")
    schedule_above: int = knob(3, "schedule rates above its centre (start x growth^k); every candidate gets the "
                               "same schedule", min=1, group="protocol")
    schedule_extend_above: int | None = knob(
        None, "rungs added above the schedule (each its highest x growth, up to --max-rps) while a candidate has "
        "not broken a limit twice at its top: every later candidate then gets them (unset: 8 on a GPU, whose "
        "capacity no CPU-sized schedule reaches; 0 on CPU backends)", min=0, group="protocol")
    min_agreement: float = knob(0.9, "numerics gate: a candidate whose dtype or quantization differs from the "
                                "highest-precision candidate's (the fixed reference) needs its greedy output text "
                                "to equal the reference's exactly on this share of the requests (1 - it is the "
                                "stated tolerance), or it cannot be adopted", min=0, max=1)
    min_rps: float = knob(0.25, "lowest rate the schedule probes (each probe there lasts a minute or more)",
                          min=0.001, group="protocol")
    max_rps: float = knob(1000.0, "highest rate the search probes", min=0.01, group="protocol")
    servers_up: str = knob("auto", "two: the best so far stays up while the next is searched and the top two are "
                           "both up for the duel; one: one server at a time (auto: two on CPU, one on a GPU)",
                           choices=("auto", "one", "two"), group="protocol")

    def check(self) -> None:
        if (self.input_tokens + self.output_tokens) * (1 + self.length_range) > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output exceeds --max-model-len {self.max_model_len}")
        if self.min_rps >= self.max_rps:
            raise InvalidInput("--min-rps must be below --max-rps")


GPU_EXTEND_ABOVE = 8  # rungs a GPU's schedule may grow upward: x2^8 = 256 times its top before the search gives up
PLANNED_DEVICE_GIB = 141  # a dry run on a machine without the GPU maps the pool onto an H200's memory (stated)


def device_bytes(cfg: Config) -> int:
    """The memory of the first device GPU= names: a MIG instance's own, never its parent's (NVML)."""
    device = (parse_gpus(cfg.gpu) or (0,))[0]
    try:
        return memory_total_bytes(device)
    except CapabilityMissing as exc:
        if planning_only():
            return PLANNED_DEVICE_GIB << 30
        raise InvalidInput(f"GPU {device}: cannot read its memory for the KV pool mapping ({exc})") from None


def candidate_dtypes(cfg: Config, backend: str) -> tuple[tuple[str, ...], str]:
    """The candidates' dtypes, the base first, and why: --dtypes as given; else on a CPU backend the dtype this host
    serves (``choose_dtype``: bf16 only with native bf16 arithmetic, or --dtype) and then the other, so the grid's
    other dimensions vary around the dtype that serves fastest here; else bfloat16 (a GPU's)."""
    if cfg.dtypes:
        return cfg.dtypes, f"candidate dtypes {', '.join(cfg.dtypes)}, set by --dtypes"
    if backend not in CPU_BACKENDS:
        return ("bfloat16",), f"candidate dtype bfloat16 on {backend}"
    choice = choose_dtype(backend, host_isa(), cfg.dtype)
    dtypes = (choice.dtype, "float32" if choice.dtype == "bfloat16" else "bfloat16")
    return dtypes, f"candidate dtypes {', '.join(dtypes)}: the base {choice.dtype}, as {choice.reason}"


def in_this_shape(light: LightLoad | None, result: Result | None, cfg: Config,
                  gpu: bool = False) -> LightLoad | None:
    """The cited saturation point carried to this bench's request shape (bench-66 serves shorter requests): the
    schedule's centre, so a candidate's capacity falls inside the schedule rather than below it. On CPU backends by
    the reference host's rates; on a GPU by the cited run's own light-load prefill and decode rates, else left
    uncarried (the schedule then extends upward from it). Its light-load latencies are of the other shape and are not
    carried: relative SLOs then come from this bench's own light probe."""
    shape = cited_shape(result)
    if light is None or light.rate_rps is None or shape is None or shape == (cfg.input_tokens, cfg.output_tokens):
        return light
    target = (cfg.input_tokens, cfg.output_tokens)
    if gpu:
        rate, why = carried_rate(light.rate_rps, result, target)
        carried = (f"its saturation point {why}" if rate is not None else
                   f"its saturation point {light.rate_rps:.3g} req/s is {why}; the schedule is centred on it as "
                   "measured and extends upward")
    else:
        ratio, why = request_cost_ratio(shape, target)
        rate = round(light.rate_rps * ratio, 3)
        carried = f"its saturation point {light.rate_rps:.3g} req/s {why} = {rate:g} req/s"
    return replace(light, rate_rps=light.rate_rps if rate is None else rate, ttft_ms=None, tpot_ms=None,
                   source=f"{light.source}; {carried} in this bench's requests (its light-load latencies, of "
                          f"{shape[0]}+{shape[1]}-token requests, are not)")


def cited_baseline(cfg: Config, placement: Placement, model: PreparedModel) -> tuple[Citation | None, str | None]:
    """The bench-66 run the schedule is centred on, and a note when the newest was passed over (``cited_bench66``)."""
    return cited_bench66(cfg.baseline, "--baseline", placement, model)


def plan(cfg: Config, model: PreparedModel) -> Plan:
    placement = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime)
    dtypes, dtypes_why = candidate_dtypes(cfg, placement.backend)
    mappings: dict = {}
    if placement.backend in ("vllm", "sglang"):
        candidates, mappings = gpu_candidates(
            cfg.backends, cfg.max_num_seqs_values, cfg.quantizations, dtype=dtypes[0], full=cfg.full_grid,
            params=parameter_count(Path(model.path)), kv_pool_gib=cfg.gpu_kv_pool_gib, device_bytes=device_bytes(cfg),
            activation_gib=cfg.gpu_activation_gib, in_use_gib=cfg.gpu_in_use_gib)
    else:
        candidates = cpu_candidates(dtypes, cfg.max_num_seqs_values, cfg.kv_cache_values_gib, full=cfg.full_grid)
    citation, passed_over = cited_baseline(cfg, placement, model)
    cited: dict[str, Any] | None = None
    light, fallback = None, ""
    if citation:  # a cited run too weak to use (undetermined bracket) is named, and this bench probes itself
        cited = citation.to_dict(Path.cwd())
        found, weak = cited_light_load(citation.result, f"bench-66 light load, {cited['manifest']}")
        light = in_this_shape(found, citation.result, cfg, gpu=bool(mappings))
        fallback = f"the cited bench-66 run {cited['run_id']} is not used: {weak}; this bench probes light load itself"
        fallback = fallback if weak else ""
        cited.update(used=not weak, fallback=fallback or None)
    names = [c.name for c in candidates]
    tier = default_tier(placement.backend) if cfg.slo_tier == "auto" else cfg.slo_tier
    if cfg.schedule_extend_above is None:
        cfg = replace(cfg, schedule_extend_above=GPU_EXTEND_ABOVE if mappings else 0)
    campaign = Campaign(cfg, names, light, tier, fallback, qualifies=lambda history, name: numerics_gates(
        history, candidates, cfg.min_agreement).get(name, {}).get("passed", True))
    one = (cfg.servers_up if cfg.servers_up != "auto" else "one" if mappings else "two") == "one"
    phase = Phase("searches and duel", tuple(names), campaign.steps, still_needed=alone if one else campaign.keep,
                  planned_steps=1 + len(names) * (cfg.schedule_below + cfg.schedule_extend_below  # without extension
                                                    + cfg.schedule_above + 1) + 2 * cfg.repeats + bool(cfg.confirm_s))
    protocol = ("every candidate probed on one shared schedule of rates on its own server start" +
                ("" if one else ", the best so far kept up") +
                "; a leader standing alone duels the runner-up, interleaved (A B / B A) inside its capacity" +
                (" across restarts" if one else " on live servers"))
    return Plan(
        workloads=(), servers=tuple(c.variant() for c in candidates), arms=(), schedule=Schedule((phase,), protocol),
        warmup=campaign.request_list(Arrival("closed", concurrency=1), seed=cfg.seed),
        read=lambda history: deployment_reading(history, campaign, candidates=candidates, cited=cited,
                                                mappings=mappings, title=SPEC.title),
        run_label=f"capacity under SLOs: {', '.join(names)}",
        columns=(TTFT_P99, TPOT_P99, E2E_P99, REQUEST_RATE, PEAK_MEMORY_GIB),
        notes=(dtypes_why, *([passed_over] if passed_over else []),
               "every probe replays the same request list at its Poisson rate (a faster rate's list is longer, so its "
               "arrivals span --probe-seconds, and starts with the same requests); only the arrival schedule differs",
               "a probe where the client could not keep its schedule cannot pass", claim_note(cfg),
               *([fallback] if fallback else [])))


def claim_note(cfg: Config) -> str:
    """The exceedance claim this size can make, stated before anything runs (``exceedance.claim_level``)."""
    n = cfg.requests * cfg.scale
    return (f"a rate is certified at the share of requests over the SLOs its steady requests can show at 95 %: a "
            f"probe of {n} requests at best <= {claim_level(n):.1%} (fewer once its first wave is dropped; none "
            f"looser than {MAX_CLAIM:.0%} is certified); a P99 claim (<= 1 %) needs >= {needed_requests()} at a rate: "
            "lengthen --probe-seconds, or replay the deploy point with --confirm-s"
            + (f" ({cfg.confirm_s:g} s set)" if cfg.confirm_s else ""))


SPEC = BenchSpec(
    name="72",
    semantic_id="INF-SINGLE-GPU-DEPLOY",
    question="what should one device run, and up to what load?",
    config=Config,
    plan=plan,
    crosses_starts=True,
    outputs=("capacity.png",),
    next_steps={
        "adopt": "deploy the adopted candidate at up to its capacity; confirm on the target device "
        "(make bench-72 GPU=0)",
        "inconclusive": "raise --repeats and --requests to narrow the capacity intervals",
        "blocked": "read the server log tail in the failed probe's result, fix the cause and rerun make bench-72",
        "aborted": "the run was interrupted: rerun make bench-72",
    },
)
