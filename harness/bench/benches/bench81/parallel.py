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
from harness.bench.placement import planning_only
from harness.bench.records import Reading
from harness.bench.spec import Arm, History, Phase, ServerVariant, Step, WorkloadPlan
from harness.workload import Arrival, Common

BIND = "VLLM_CPU_OMP_THREADS_BIND"
EVEN_HEADS = "smollm2-135m-even-heads"


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


def measurable(label: str, cfg, cpu: bool, cores: int) -> bool:
    """Whether a layout's whole stack fits this host's cores (always on GPUs)."""
    return core_scale(devices_of(label, cfg), cpu, cores)[0] is not None


def load_multiple(label: str, cfg, cpu: bool, cores: int) -> int:
    """How many devices' worth of requests and concurrency a layout gets: its devices when it is measurable here
    (each device saturated alike), else one (a layout not measurable here shows that its path serves)."""
    return devices_of(label, cfg) if measurable(label, cfg, cpu, cores) else 1


def request_list(cfg, multiple: int = 1, check: bool = False) -> WorkloadPlan:
    """The closed loop at saturation (--concurrency requests in flight per device, refilling, --requests per
    device), or with --rate-rps the same Poisson list for every layout. ``check``: a layout not measurable here
    gets one wave of --concurrency requests, a serving check (nothing is read from it but that it served)."""
    if cfg.rate_rps is not None:
        arrival, requests, name = Arrival("poisson", rate_rps=cfg.rate_rps), cfg.requests * cfg.scale, "offered"
    elif check:
        arrival, requests, name = Arrival("closed", concurrency=cfg.concurrency), cfg.concurrency, "serving check"
    else:
        arrival = Arrival("closed", concurrency=cfg.concurrency * multiple)
        requests, name = cfg.requests * cfg.scale * multiple, f"closed x{multiple}"
    common = Common(arrival=arrival, seed=cfg.seed, requests=requests, input_tokens=cfg.input_tokens,
                    output_tokens=cfg.output_tokens, input_range=cfg.length_range, output_range=cfg.length_range)
    return WorkloadPlan(name, "random", common)


def steps(cfg, variant: str, multiple: int, start: int = 1, check: bool = False):
    """A layout's runs on its ``start``-th server start. Repeats are numbered across starts: start s holds
    (s-1) x repeats + 1 ... s x repeats."""
    arm = Arm(variant, request_list(cfg, multiple, check), variant)

    def gen(history: History) -> Iterator[Step]:
        for repeat in range((start - 1) * cfg.repeats + 1, start * cfg.repeats + 1):
            history.notes.setdefault("loadavg_1m", {}).setdefault(variant, []).append(round(os.getloadavg()[0], 2))
            yield repeat, arm
    return gen


def starts_of(cfg, servers: Sequence[ServerVariant], cpu: bool, cores: int) -> dict[str, int]:
    """Server starts per variant: ``cfg.starts`` for a layout whose stack fits the host, and for a baseline one of
    them is read against; once for a layout not measurable on ``cores`` cores (its run shows the path works and
    what it served, but no efficiency is read from it, so replicating it buys nothing); none for a baseline only
    such layouts use (nothing is read against it). ``single`` always gets ``cfg.starts``: its capacity is this
    host's single-device figure."""
    names = [s.name for s in servers]
    fits = {n: measurable(n, cfg, cpu, cores) for n in names if not n.startswith("single")}
    out = {n: cfg.starts if fits[n] else 1 for n in fits}
    for n in names:
        if n.startswith("single"):
            used = any(fits[m] for m in fits if baseline_of(m) == n)
            out[n] = cfg.starts if n == "single" or used else 0
    return out


def phases(cfg, servers: Sequence[ServerVariant], starts: dict[str, int], cpu: bool, cores: int) -> tuple[Phase, ...]:
    """ABAB restarts: round s starts every baseline, then every layout, each for its s-th time (``starts``)."""
    base = [s.name for s in servers if s.name.startswith("single")]
    order = base + [s.name for s in servers if s.name not in base]
    return tuple(Phase(f"{name} start {start}", (name,),
                       steps(cfg, name, load_multiple(name, cfg, cpu, cores), start,
                             check=not measurable(name, cfg, cpu, cores)),
                       planned_steps=cfg.repeats)
                 for start in range(1, cfg.starts + 1) for name in order if start <= starts[name])


def load_text(cfg) -> str:
    if cfg.rate_rps is not None:
        return (f"Poisson {cfg.rate_rps:g} req/s (--rate-rps), the same {cfg.requests * cfg.scale}-request list for "
                "every layout")
    return (f"closed loop at saturation: {cfg.concurrency} requests in flight per device, refilling, "
            f"{cfg.requests * cfg.scale} requests per device (a layout not measurable here: one wave of "
            f"{cfg.concurrency}, a serving check), "
            "read over each run's steady window")


def communication(server: dict) -> dict:
    """A server's communication record as servers.json keeps it (requested, environment, effective)."""
    return server.get("communication") or {}


def by_reason(why: dict[str, str]) -> list[str]:
    """Layouts left out of the headline, those left out for one reason named together: ``pp2, tp2 (why)``."""
    return [f"{', '.join(k for k, v in why.items() if v == reason)} ({reason})"
            for reason in dict.fromkeys(why.values())]


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
        labels = list(dict.fromkeys(r.label for r in history.runs))
        rows = [layout_scaling(history.runs, label, devices_of(label, cfg), baseline_of(label),
                               resamples=cfg.resamples, seed=cfg.seed, per_start=cfg.repeats, cpu=cpu,
                               host_cores=cores) for label in labels]
        table = tabulate(scaling_table(rows), headers=SCALING_HEADERS, tablefmt="github")
        loads = history.notes.get("loadavg_1m", {})
        bound = (f"each device is one CPU core ({BIND} pins every rank, node or replica to its own) and the API "
                 f"server, scheduler and client need one more; the host has {cores} usable core(s), and the "
                 "efficiency denominator counts every core a stack uses" if cpu else
                 "each device is one GPU; interconnect as in fingerprint.json's topology")
        lines = ["", table, "", f"load: {load_text(cfg)}", f"bounded by: {bound}",
                 "load average (1 min) at each repeat: " + json.dumps(loads)]
        base_ok = {r.layout: r.valid for r in rows if r.layout == r.baseline}
        eff = [r for r in rows if r.efficiency is not None and r.valid and base_ok.get(r.baseline, False)]
        why = {r.layout: r.cores if r.cores.startswith("not measurable") else "invalid"
               for r in rows if r.layout != r.baseline and r not in eff}
        left_out = by_reason(why)
        if left_out:
            lines.append("not in the headline: " + "; ".join(left_out))
        headline, summary = headline_and_summary(rows, eff, left_out)
        servers = history.servers
        details = {"layouts": [r.to_dict() for r in rows], "load": load_text(cfg),
                   "offered_rps": cfg.rate_rps, "concurrency_per_device": None if cfg.rate_rps else cfg.concurrency,
                   "load_multiples": {label: load_multiple(label, cfg, cpu, cores) for label in labels},
                   "device": "cpu core" if cpu else "gpu", "bounded_by": bound,
                   "loadavg_1m": loads, "layout_notes": {k: v.note for k, v in LAYOUTS.items()},
                   "communication": {name: communication(s) for name, s in servers.items()},
                   "starts": cfg.starts, "runs_per_start": cfg.repeats,
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
