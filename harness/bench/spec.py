"""A bench is a declarative spec: config → workloads → server variants → arms → claim, controls or sweep.

A spec module under ``harness/bench/benches/`` exports ``SPEC = BenchSpec(...)``:

- ``config``: a frozen dataclass extending ``BenchConfig``; its fields (``knob``) are
  ``infkit bench NN``'s flags and the Make variables, with help and constraints;
- ``plan(cfg, model) -> Plan``: what to run, as data:
  * ``workloads``: generator kind + parameters (exact token counts, content-hashed);
  * ``servers``: variants — any ``BackendConfig`` field, or the backend itself, may differ;
  * ``arms``: workload × server variant (+ client options);
  * ``claims``: paired comparisons (metric, baseline arm, treatment arm) read by the
    decision rule of ``stats.decide``; ``controls`` must show no effect (else no adopt);
  * ``schedule``: how arms meet servers (``phases_for``: interleaved ABBA on one start,
    alternating starts, or every variant kept up at once), or steps made while running
    (a sweep or a search reads earlier arm runs to choose the next); a ``Schedule`` carries
    the protocol sentence run.json records, so the two cannot disagree;
  * ``read``: for a sweep, the rule that turns arm runs into the conclusion;
  * ``warmup``: unmeasured requests after each server start, derived by the framework from
    the first measured workload (``--warmup-requests``) unless the plan names its own or opts out.

The bench's title and doc are derived from its number, semantic id and module docstring.
One runner (``harness.bench.runner``) executes every spec.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.backends.base import BackendConfig
from harness.backends.host_dtype import SERVED_DTYPES
from harness.backends.layouts import Layout
from harness.bench.lib.hostprofile import DEFAULT_SIZE, SIZES
from harness.bench.metrics import (
    E2E_P50,
    OUTPUT_TOKENS_PER_S,
    PEAK_MEMORY_GIB,
    TPOT_P50,
    TTFT_P50,
    TTFT_P95,
    Metric,
)
from harness.bench.records import ArmRun, Reading, Workload
from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from harness.knobs import KnobConfig, knob
from harness.workload import Arrival, Common

if TYPE_CHECKING:
    from harness.models import PreparedModel

Order = Literal["sequential", "alternate", "concurrent"]
DEFAULT_COLUMNS = (TTFT_P50, TTFT_P95, TPOT_P50, E2E_P50, OUTPUT_TOKENS_PER_S, PEAK_MEMORY_GIB)


@dataclass(frozen=True)
class BenchConfig(KnobConfig):
    """Knobs every serving bench has; a spec's config adds its own fields after these (checked when made)."""

    size: str = knob(DEFAULT_SIZE, "named size of the request lists: quick (about half the reference host's work) or "
                     "reference; the same size replays the same requests on every host (infkit doctor recommends one)",
                     choices=tuple(SIZES))
    scale: int = knob(1, "multiply the number of measured requests per arm", min=1, max=1000, group="protocol")
    repeats: int = knob(3, "repeats of every arm, interleaved (< 5 lowers the evidence level to single)", min=1,
                        max=1000)
    reruns: int = knob(3, "invalid arm runs re-run in their place per bench (same repeat and arrivals); once "
                       "spent, the next invalid run stops the bench with its reason", min=0, group="protocol")
    wait_quiet_s: float = knob(0.0, "before the first server start, wait up to this many seconds for processes "
                               "that are not the kit's to stop competing for the CPU (0: read the load, say it, go on)",
                               min=0, group="protocol")
    warmup_requests: int = knob(2, "unmeasured requests after each server start", min=0, group="protocol")
    seed: int = knob(0, "seed of every random dimension of the workloads", min=0, group="protocol")
    model: str = knob("smollm2-135m", "served model: a catalog name, a Hugging Face-format checkpoint directory, or "
                      "an org/name id in the local Hugging Face cache (never downloaded)")
    backend: str | None = knob(None, "vllm-cpu, vllm or sglang (default follows the runtime)", group="protocol")
    runtime: str | None = knob(None, "local or docker (default: docker with a GPU and an engine, else local)",
                               group="protocol")
    gpu: str | None = knob(None, "GPU index for the containerized path; without a GPU the CPU default runs",
                           group="protocol")
    usd_per_gpu_hour: float | None = knob(None, "price of one GPU-hour in USD: GPU results gain the cost per million "
                                          "output tokens", min=0, group="protocol")
    kv_cache_space_gib: int = knob(2, "CPU backends: KV-cache size in GiB", min=1, group="protocol")
    max_model_len: int = knob(4096, "the server's context length in tokens", min=64, group="protocol")
    enforce_eager: bool = knob(False, "serve without torch.compile or CUDA graphs (--enforce-eager): starts in "
                               "seconds instead of compiling, at slower steps; recorded in every server's command",
                               group="protocol")
    start_timeout_s: float = knob(900.0, "seconds a server may take to become healthy", min=1, group="protocol")
    request_timeout_s: float = knob(120.0, "per-request timeout in seconds", min=0.001, group="protocol")
    resamples: int = knob(10_000, "resamples of every request-level bootstrap interval", min=100, group="protocol")
    margin: float | None = knob(None, "smallest relative effect worth acting on, for every claim "
                                      "(default: each claim's or metric's, 5 %)", min=0)
    out_root: Path | None = knob(None, "root of the run directories (default: runs/NN)", group="protocol")
    sign: bool = knob(True, "sign the run directory into manifests/", group="protocol")
    aa_control: str = knob("latest", "start-to-start variance for cross-start claims: latest (every bench-00 run on "
                           "this host key within 14 days, pooled), none, or one bench-00 manifest path",
                           group="protocol")
    server: tuple[str, ...] = knob((), "VARIANT=URL: measure that server variant on a server you run instead of "
                                   "starting it (repeatable: --server cache-on=http://127.0.0.1:8001 --server "
                                   "cache-off=...), or a JSON file mapping variant names to URLs; each is checked "
                                   "(model, effective settings) before measuring")
    dtype: str | None = knob(None, "served dtype (default on vllm-cpu: bfloat16 where the CPU has AMX or AVX-512 "
                             "BF16, else float32; GPU backends: auto); the choice and its reason go to run.json",
                             choices=SERVED_DTYPES, group="protocol")


@dataclass(frozen=True)
class InputFile:
    """A file a workload generator reads (a trace): written under the run's ``workloads/inputs/`` first, and the
    option holding it becomes that path, so the input is part of the signed run."""

    name: str
    text: str


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload file the bench makes: a generator kind and its parameters (an option may be an ``InputFile``)."""

    name: str
    kind: str
    common: Common
    options: Mapping[str, Any] = field(default_factory=dict)
    measured: bool = True


@dataclass(frozen=True)
class ServerVariant:
    """A server start's settings: ``BackendConfig`` fields (and the backend) that differ from the bench's base.

    ``layout`` spans several processes (vLLM's multi-node launch, client-spread replicas, Ray-placed
    replicas: ``harness.backends.layouts``); ``model`` serves another prepared model than the bench's.
    """

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    backend: str | None = None
    optional: bool = False  # the engine may refuse it here: a refused start is capability_missing, not fatal
    note: str = ""
    # settings of the engine's effective config (the backend's dotted paths) this variant exists for, read back
    # after the start: a value the engine did not apply is capability_missing (optional) or stops the bench
    expect: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout | None = None
    model: str | None = None


@dataclass(frozen=True)
class Arm:
    """A measured combination: a workload on a server variant, with its own client options."""

    label: str
    workload: str | WorkloadPlan  # a plan's workload by name, or one made while running (sweeps)
    server: str
    client: Mapping[str, Any] = field(default_factory=dict)  # MeasureConfig fields, e.g. max_concurrency

    @property
    def workload_name(self) -> str:
        return self.workload if isinstance(self.workload, str) else self.workload.name


@dataclass(frozen=True)
class Claim:
    """Treatment against baseline on ``metric``: a paired effect with its interval, read by ``stats.decide``."""

    metric: Metric
    baseline: str
    treatment: str
    name: str = "effect"
    margin: float | None = None  # smallest relative effect worth acting on; None: the metric's (or --margin)
    primary: bool = False  # the bench's one primary claim (default: the first); the others are Holm-corrected
    strata: Callable[[RequestRecord], Hashable] | None = None  # design cell of a request (hit/miss, class)
    block: int = 1  # request resampling in moving blocks of this many (loaded open-loop runs)


Step = tuple[int, Arm]  # (repeat, arm)


@dataclass
class History:
    """What a running bench has measured so far; dynamic steps read it to choose the next arm."""

    cfg: Any
    model: PreparedModel
    runs: list[ArmRun] = field(default_factory=list)
    workloads: dict[str, Workload] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)  # what steps decided (e.g. a probe's capacity)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # servers.json's records, kept current
    refused: dict[str, str] = field(default_factory=dict)  # optional server variants the engine refused: message
    run_dir: Path | None = None  # the run directory: server logs (servers/server-<variant>.log) and arm files
    start_control: Any = None  # the pooled start variance cited (``startcontrol.StartVariance``), read by the claims

    def server_log(self, name: str) -> str:
        """Server variant ``name``'s log as written so far ('' when it has none)."""
        path = self.run_dir / "servers" / f"server-{name}.log" if self.run_dir else None
        return path.read_text(encoding="utf-8", errors="replace") if path and path.is_file() else ""

    def of(self, label: str) -> list[ArmRun]:
        return [r for r in self.runs if r.label == label]


@dataclass(frozen=True)
class Phase:
    """Servers kept up together and the steps run on them, fixed or chosen while running."""

    name: str
    servers: tuple[str, ...]
    steps: Sequence[Step] | Callable[[History], Iterable[Step]]
    planned_steps: int | None = None  # for progress when ``steps`` is made while running
    keep: tuple[str, ...] = ()  # servers of the previous phase that stay up into this one instead of restarting
    # Servers the phase still needs besides the next step's: the others are stopped before that step
    # (a search over many variants keeps memory to a few servers). None: all stay up until the phase ends.
    still_needed: Callable[[History], Iterable[str]] | None = None
    # Steps made while running that are a fixed order in all but skipping (pairs that drop a refused variant's
    # partner): an invalid run is redone in its place as in fixed steps (``harness.bench.invalid``).
    rerun: bool = False


@dataclass(frozen=True)
class Schedule:
    """The phases a plan runs and the protocol sentence that says what they do (recorded in run.json)."""

    phases: tuple[Phase, ...]
    protocol: str


WARMUP = "warmup"  # the derived warm-up workload's name
AUTO = "auto"  # Plan.warmup: derive the warm-up from the first measured workload


@dataclass(frozen=True)
class Plan:
    workloads: tuple[WorkloadPlan, ...]
    servers: tuple[ServerVariant, ...]
    arms: tuple[Arm, ...]
    schedule: Schedule
    claims: tuple[Claim, ...] = ()
    controls: tuple[Claim, ...] = ()
    read: Callable[[History], Reading] | None = None
    notes: tuple[str, ...] = ()
    columns: tuple[Metric, ...] = DEFAULT_COLUMNS
    # sent unmeasured after each server start: AUTO derives it from the first measured workload, a ``Common``
    # from that request shape (benches whose workloads are made while running), a name picks one of the plan's
    # workloads, None opts out (``with_warmup``)
    warmup: str | Common | None = AUTO
    reset_prefix_cache: bool = True  # before every arm run
    ignore_eos: bool = True
    run_label: str = ""
    # a Poisson/gamma workload redraws its arrivals per repeat, the same draw for every arm of that repeat
    # (``harness.bench.realisation``); False replays one draw in every repeat
    fresh_arrivals: bool = True

    @property
    def phases(self) -> tuple[Phase, ...]:
        return self.schedule.phases

    @property
    def order(self) -> str:
        return self.schedule.protocol

    def server(self, name: str) -> ServerVariant:
        return next(s for s in self.servers if s.name == name)

    def measured_workload(self) -> WorkloadPlan | None:
        """The first measured workload: a named one, or the first an arm makes while running."""
        named = next((w for w in self.workloads if w.measured), None)
        made = (a.workload for a in self.arms if isinstance(a.workload, WorkloadPlan))
        return named or next(made, None)

    @property
    def warmup_name(self) -> str | None:
        """The resolved warm-up workload's name (None: no warm-up)."""
        return self.warmup if isinstance(self.warmup, str) and self.warmup != AUTO else None

    def with_warmup(self, requests: int, seed: int) -> Plan:
        """The plan with its warm-up resolved: AUTO becomes ``requests`` random prompts of the first measured
        workload's lengths, one at a time, on their own seed (they can never prime a measured prefix); no
        warm-up when ``requests`` is 0 or nothing is measured from a file."""
        if isinstance(self.warmup, str) and self.warmup != AUTO or self.warmup is None:
            return self
        first = self.measured_workload()
        shape = self.warmup if isinstance(self.warmup, Common) else first.common if first else None
        if not requests or shape is None:
            return dataclasses.replace(self, warmup=None)
        common = dataclasses.replace(shape, arrival=Arrival("closed", concurrency=1), seed=seed + 10_000,
                                     requests=requests)
        warm = WorkloadPlan(WARMUP, "random", common, measured=False)
        return dataclasses.replace(self, workloads=(*self.workloads, warm), warmup=WARMUP)

    def check(self) -> None:
        """A plan that cannot run is a bug in its spec; say which part."""
        workloads = {w.name for w in self.workloads}
        servers = {s.name for s in self.servers}
        arms = {a.label for a in self.arms}
        fields = {f.name for f in dataclasses.fields(BackendConfig)}
        for variant in self.servers:
            unknown = sorted(set(variant.settings) - fields)
            if unknown:
                raise InvalidInput(f"spec: server variant {variant.name!r} sets unknown backend fields {unknown}")
        for arm in self.arms:
            if isinstance(arm.workload, str) and arm.workload not in workloads:
                raise InvalidInput(f"spec: arm {arm.label!r} names unknown workload {arm.workload!r}")
            if arm.server not in servers:
                raise InvalidInput(f"spec: arm {arm.label!r} names unknown server variant {arm.server!r}")
        for claim in (*self.claims, *self.controls):
            for label in (claim.baseline, claim.treatment):
                if label not in arms:
                    raise InvalidInput(f"spec: claim {claim.name!r} names unknown arm {label!r}")
        if self.warmup_name is not None and self.warmup_name not in workloads:
            raise InvalidInput(f"spec: warm-up workload {self.warmup!r} is not a workload of the plan")
        if not self.claims and self.read is None:
            raise InvalidInput("spec: a plan needs claims or a read rule")


def interleaved(arms: Sequence[Arm], repeats: int) -> list[Step]:
    """(repeat, arm) in run order, ABBA: A B in odd rounds, B A in even ones, for ``repeats`` rounds. Under a host
    that drifts run by run, A B A B puts B one run later in every round, a bias that more repeats do not shrink
    (1 % faster a run: false adopt at the margin 7.4 % at 5 repeats, 13.7 % at 8); reversed every other round the
    drift cancels pairwise and the rest widens the interval (2.6 %, 2.1 %: ``benchmarks/coverage.py``)."""
    return [(r, arm) for r in range(1, repeats + 1) for arm in (arms if r % 2 else arms[::-1])]


def phases_for(arms: Sequence[Arm], repeats: int, order: Order = "sequential") -> Schedule:
    """Phases for fixed arms, with the protocol sentence that says what was done.

    - sequential: each server variant started once; its arms interleave ABBA across repeats;
      arms on different variants are compared across server starts, not interleaved;
    - alternate: every repeat starts each variant in turn (A B A B across restarts);
    - concurrent: every variant started once and kept up; all arms interleave across servers.
    """
    variants = list(dict.fromkeys(a.server for a in arms))
    by_variant = {v: [a for a in arms if a.server == v] for v in variants}
    if order == "concurrent":
        phase = Phase("all", tuple(variants), interleaved(arms, repeats))
        return Schedule((phase,), f"every server variant ({', '.join(variants)}) kept up; all arms interleaved ABBA")
    if order == "alternate":
        phases = tuple(Phase(f"{v}-r{r}", (v,), [(r, a) for a in by_variant[v]])
                       for r in range(1, repeats + 1) for v in variants)
        return Schedule(phases, "server variants alternate starts every repeat; arms on one start interleave")
    phases = tuple(Phase(v, (v,), interleaved(by_variant[v], repeats)) for v in variants)
    if len(variants) == 1:
        return Schedule(phases, "interleaved ABBA (A B, then B A) on one server start")
    return Schedule(phases, "arms on one server start interleave ABBA; each server variant is started once, in "
                            f"turn ({', '.join(variants)}), so effects across variants are not interleaved")


# The decisions a next step can be written for (the conclusion's decision, or "aborted" / "vetoed"):
# a spec naming another key is a typo that would show the wrong advice, and fails at import.
NEXT_STEP_KEYS = ("adopt", "reject", "inconclusive", "blocked", "aborted", "vetoed")
COMMON_NEXT_STEPS = {
    "inconclusive": "raise --repeats or SCALE to narrow the intervals",
    "blocked": "read the server log tail in the failed arm's result, fix the cause and rerun make bench-{name}",
    "aborted": "the run was interrupted: rerun make bench-{name}",
}


@dataclass(frozen=True)
class BenchSpec:
    """A project exit as data: its number, question, config and plan."""

    name: str  # the bench number: "69"
    semantic_id: str
    question: str
    config: type[BenchConfig]
    plan: Callable[[Any, PreparedModel], Plan]
    next_steps: Mapping[str, str]  # by decision (NEXT_STEP_KEYS); COMMON_NEXT_STEPS fill the rest
    outputs: tuple[str, ...] = ()  # extra files it writes, for the command's closing lines
    crosses_starts: bool = False  # a claim compares arms served by different server starts (pools bench-00's)

    @property
    def help(self) -> str:
        """The one-line help of ``infkit bench NN``."""
        return f"{self.semantic_id}: {self.question}"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.next_steps) - set(NEXT_STEP_KEYS))
        if unknown:
            raise ValueError(f"bench-{self.name}: next_steps keys {unknown} are not decisions "
                             f"({', '.join(NEXT_STEP_KEYS)})")

    @property
    def title(self) -> str:
        return f"bench-{self.name} {self.semantic_id}"

    @property
    def doc(self) -> str:
        """The spec module's docstring: what the bench measures and how."""
        module = sys.modules.get(getattr(self.plan, "__module__", ""))
        return (module.__doc__ or "") if module else ""

    def out_root(self, cfg: BenchConfig) -> Path:
        return cfg.out_root or Path("runs") / self.name

    @property
    def steps(self) -> dict[str, str]:
        """The next step for each decision: the spec's own, over what every bench says."""
        return {k: v.format(name=self.name) for k, v in COMMON_NEXT_STEPS.items()} | dict(self.next_steps)
