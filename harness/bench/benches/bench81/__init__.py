"""bench-81, DIST-INFERENCE: what do more devices buy, on the engine's own parallel paths?

Throughput at saturation on each layout: a closed loop keeping --concurrency requests in flight per
device (refilling, --requests per device), read over each run's steady window (from the loop filling
up to the last send; ramp and drain left out), or with --rate-rps one Poisson list at that offered
load for every layout. The layouts: one instance on one device (the baseline), vLLM's pipeline, tensor
and data parallel 2, data parallel across the nodes of a local Ray cluster, pipeline parallel 2
across two "nodes" through vLLM's multi-node launcher, and vLLM's Ray executor where the engine
runs it. Every layout is started --starts times (3), alternating with the single-device baseline
(ABAB restarts: round s starts the baseline, then each layout); --repeats runs per start, back to
back. The server start is the unit of replication. On the CPU default a device is one core, and the
API server, scheduler and client need one more. Read: per layout, output tok/s, per device, speedup
and scaling efficiency (speedup over the ratio of every core the two stacks use) with intervals from
resampled rounds, and TTFT/TPOT/E2E at that load. A layout whose stack needs more cores than the host
has is "not measurable on N cores" and started once with one wave of --concurrency requests: its run
shows the path works and what it served, but no efficiency is read from it. Invalid rows stay out of
the headline. A layout the engine refuses here is capability_missing with the engine's message. Real
nodes: RAY_ADDRESS=... or NNODES=2 NODE_RANK=0 MASTER_ADDR=... with followers from docker/comm-parallel
(docs/bench-81.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import cast

from harness.backends import get_backend
from harness.backends.cpu_placement import allowed_cores
from harness.bench.benches.bench81 import parallel as dist
from harness.bench.lib.gpuload import Capacity, gpu_load
from harness.bench.lib.hostprofile import request_shape
from harness.bench.lib.probed import probed, stated
from harness.bench.placement import Placement, resolve_placement
from harness.bench.spec import BenchConfig, BenchSpec, Plan, Schedule
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common

REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS = 256, 32
MIN_OUTPUT_TOKENS = 16  # a closed-loop request stays mostly decode, the throughput read at saturation
REFERENCE_CONCURRENCY, REFERENCE_REQUESTS = 8, 24  # per device on the CPU default: three waves
GPU_WAVES = 3  # on a GPU, requests per device in waves of the measured in-flight load, as on the CPU default


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for <= 15 minutes on 2 CPU cores once the serving env and the models are cached."""

    layouts: tuple[str, ...] = knob(("pp2", "tp2", "dp2", "nodes-pp2", "ray-dp2", "ray-executor"),
                                    "layouts past the single-device baseline", choices=dist.CHOICES)
    repeats: int = knob(1, "runs per server start, back to back (the start is the unit of replication)", min=1)
    starts: int = knob(3, "server starts of every layout, alternating with the baseline's (< 3: single evidence); "
                          "a layout not measurable on this host's cores is started once", min=1)
    requests: int | None = knob(None, f"requests per device (x --scale; default: {REFERENCE_REQUESTS} on CPU "
                                "backends, with --concurrency 8 a steady window of 8 completions between the loop "
                                f"filling and the last send; on a GPU {GPU_WAVES} waves of --concurrency; a layout "
                                "not measurable on this host's cores: one wave of --concurrency, a serving check)",
                                min=2)
    concurrency: int | None = knob(None, f"closed-loop requests in flight per device (default: "
                                   f"{REFERENCE_CONCURRENCY}, at saturation on one CPU core; on a GPU the requests "
                                   "in flight at the measured capacity)", min=1)
    capacity_baseline: str = knob("latest", "GPU: bench-66 manifest whose saturation point sizes the in-flight "
                                  "load left unset: a path, latest or none (then a capacity probe on the first "
                                  "server)")
    input_tokens: int | None = knob(None, f"mean prompt length in tokens (default: {REFERENCE_INPUT_TOKENS} at the "
                                    "reference size, in proportion to the output at a smaller --size)", min=1)
    output_tokens: int | None = knob(None, f"mean generated tokens per request (ignore_eos: exact; default: "
                                     f"{REFERENCE_OUTPUT_TOKENS} at the reference size, fewer at a smaller --size, "
                                     f"at least {MIN_OUTPUT_TOKENS})", min=2)
    length_range: float = knob(0.25, "prompt and output lengths uniform in [N(1-r), N(1+r)]", min=0, max=0.9)
    rate_rps: float | None = knob(None, "an open-loop Poisson load in req/s instead of the closed loop, the same "
                                  "list for every layout", min=0.001)
    baseline: bool = knob(True, "measure the single-device baselines (without them: no efficiency)")
    ray_address: str | None = knob(None, "a running Ray cluster for the ray-executor layout (RAY_ADDRESS)",
                                   group="protocol")
    nnodes: int = knob(1, "real nodes for vLLM's multi-node launcher; this machine is the head", min=1,
                       group="protocol")
    node_rank: int = knob(0, "this machine's node rank (the bench runs on node 0)", min=0, group="protocol")
    master_addr: str = knob("127.0.0.1", "the head node's address for --nnodes > 1", group="protocol")
    master_port: int = knob(29500, "the head node's torch.distributed port", min=1, max=65535, group="protocol")

    def check(self) -> None:
        if self.node_rank > 0:
            raise InvalidInput(f"NODE_RANK={self.node_rank} is a follower: start it with "
                               "docker/comm-parallel/vllm-node.sh; the bench measures from node 0")
        if len(set(self.layouts)) != len(self.layouts):
            raise InvalidInput("--layouts names a layout twice")
        # unset lengths are bounded by the reference host's, the longest the defaults can be
        longest = ((self.input_tokens or REFERENCE_INPUT_TOKENS) + (self.output_tokens or REFERENCE_OUTPUT_TOKENS)) * (
            1 + self.length_range)
        if longest > self.max_model_len:
            raise InvalidInput(f"the longest prompt plus output exceeds --max-model-len {self.max_model_len}")


def sized(cfg: Config) -> tuple[Config, tuple[int, int], str]:
    """The config with its request lengths resolved: as set, else the reference host's, both scaled by the named
    size's factor (``sized_shape``)."""
    prompt, output, why = request_shape(cfg.input_tokens, cfg.output_tokens,
                                        (REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS), cfg.size,
                                        floor=MIN_OUTPUT_TOKENS, step=4)
    return replace(cfg, input_tokens=prompt, output_tokens=output), (prompt, output), why


def loaded(cfg: Config, capacity: Capacity | None) -> Config:
    """The config with its closed loop resolved: as set, else the requests in flight at a measured capacity (a
    GPU's) in ``GPU_WAVES`` waves, else the CPU reference's."""
    concurrency = cfg.concurrency or (math.ceil(capacity.in_flight) if capacity else REFERENCE_CONCURRENCY)
    requests = cfg.requests or (GPU_WAVES * concurrency if capacity else REFERENCE_REQUESTS)
    return replace(cfg, concurrency=concurrency, requests=requests)


def plan(cfg: Config, model: PreparedModel) -> Plan:
    """On a GPU, the in-flight load left unset comes from a cited bench-66 capacity, else from a probe run first."""
    placement = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime)
    cfg, (prompt, output), shape_why = sized(cfg)
    closed = cfg.rate_rps is None and (cfg.concurrency is None or cfg.requests is None)
    load = gpu_load(cfg.capacity_baseline, "--capacity-baseline", placement, model, (prompt, output)) \
        if closed else None
    if load is None or load.capacity is not None:
        made = plan_at(loaded(cfg, load.capacity if load else None), placement, shape_why, load.notes if load else ())
        return stated(made, load.capacity) if load and load.capacity else made
    stand_in = loaded(cfg, None)
    skeleton = plan_at(stand_in, placement, shape_why, load.notes[:-1])
    warm = Common(arrival=Arrival("closed", concurrency=1), seed=cfg.seed, input_tokens=prompt, output_tokens=output)
    return probed(skeleton, warm, lambda capacity: plan_at(loaded(cfg, capacity), placement, shape_why, load.notes),
                  load.notes[-1] + "; the in-flight load per device then follows it as a cited capacity's would")


def plan_at(cfg: Config, placement: Placement, shape_why: str, load_notes: tuple[str, ...]) -> Plan:
    prompt, output = cast(int, cfg.input_tokens), cast(int, cfg.output_tokens)
    cpu = placement.backend == "vllm-cpu"
    left: dict[str, str] = {}
    layouts: tuple[str, ...] | None = None  # None: cfg.layouts as given
    if cfg.layouts == Config.layouts:  # the default list names only what the selected engine can run
        layouts, left = dist.default_layouts(cfg, cpu, get_backend(placement.backend), placement.runtime)
    servers = dist.variants(cfg, cpu, layouts)
    cores = len(allowed_cores())  # the cores this process may run on: a CPU layout's stack shares them
    starts = dist.starts_of(cfg, servers, cpu, cores)
    servers = tuple(s for s in servers if starts[s.name])
    phases = dist.phases(cfg, servers, starts, cpu, cores)
    shape = Common(
        arrival=Arrival("closed", concurrency=1),
        seed=cfg.seed,
        input_tokens=prompt,
        output_tokens=output,
    )
    protocol = (
        f"ABAB restarts: {cfg.starts} rounds, each starting the baseline then every layout; "
        f"{cfg.repeats} run(s) per start, back to back; a layout not measurable on this host's cores is started "
        f"once, and a baseline only such layouts use not at all: {json.dumps(starts)}"
    )
    return Plan(
        workloads=(),
        servers=servers,
        arms=(),
        schedule=Schedule(phases, protocol),
        read=dist.read(cfg, cpu, starts, cores),
        warmup=shape,
        run_label="parallel layouts at equal offered load",
        notes=(
            *load_notes,
            f"request lengths: {shape_why}",
            dist.load_text(cfg),
            "a device is one CPU core on the CPU default (VLLM_CPU_OMP_THREADS_BIND), one GPU elsewhere",
            *(f"default layout {n} left out on this engine: {why}" for n, why in left.items()),
        ),
    )


SPEC = BenchSpec(
    name="81",
    semantic_id="DIST-INFERENCE",
    question="what do more devices buy?",
    config=Config,
    plan=plan,
    next_steps={
        "inconclusive": "read the scaling table: an efficiency well below 1 names a shared resource (see bounded_by); "
        "on GPUs run make bench-81 GPU=0,1 or across nodes with RAY_ADDRESS= / NNODES=",
        "blocked": "read the failed layout's server log tail, fix the cause and rerun make bench-81",
    },
)
