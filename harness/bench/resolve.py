"""Resolve first, then run: everything a bench run needs, decided and checked before anything is built or started.

``resolve`` turns a spec and its config into one frozen ``ResolvedRun``, in order of cost, so a bad value fails
in one line before the expensive steps: the run target; placement (backend, runtime, devices); the servers the
user runs (``--server``: each answers and serves the run's model); the plan on a model already in the cache
(every citation audited as it is built); the served dtype; the model (prepared on first use: the one step that
may build); the checked plan, placed on its devices, with the variants the engine release cannot run; the pooled
start-to-start variance (bench-00); and each given server's verification against its variant's ``expect``. ``run_bench``
(``harness.bench.runner``) only executes what this returns.

A server the user runs is never restarted and has its prefix cache reset only where the engine offers it: a
variant whose schedule restarts it, or whose protocol resets a cache the server cannot reset, is
``capability_missing`` (an optional variant) or refused here (a required one), never run on a silently changed
protocol. A setting its engine does not expose is recorded as unverified, and the run's decision is capped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.backends import Backend
from harness.backends.base import BackendConfig, lookup
from harness.backends.host_dtype import DtypeChoice, choose_dtype
from harness.bench.launch import base_config, model_dir_of, prepare
from harness.bench.lib.citations import cite
from harness.bench.modelfit import context_record, fit_to_model
from harness.bench.placement import GPU_BACKENDS, Placement, resolve_placement
from harness.bench.planning import checked_plan, early_plan
from harness.bench.spec import BenchConfig, BenchSpec, Plan
from harness.bench.startcontrol import CITED_KEY, start_control_for
from harness.errors import InvalidInput
from harness.knobs import cited_paths, config_dict
from harness.models import PreparedModel
from harness.models.engine_read import check_user_checkpoint
from harness.models.resolve import LocalCheckpoint
from harness.progress import Progress
from harness.rundir.directory import check_run_target
from harness.rundir.fingerprint import host_isa
from harness.serving.given import Served, Verification, check_endpoint, parse_endpoints, same_model, verify

ModelOf = Callable[..., PreparedModel]  # (name, progress=...) -> the served model, prepared on first use
BackendOf = Callable[[str], Backend]


@dataclass(frozen=True)
class ResolvedRun:
    """One bench run, fully decided: what ``run_bench`` executes and ``--dry-run`` shows."""

    spec: BenchSpec
    cfg: BenchConfig  # as run: the served dtype filled in
    requested: dict[str, Any]  # the config as the user gave it
    placement: Placement
    dtype: DtypeChoice
    model: PreparedModel
    plan: Plan  # checked and placed on its devices
    refused: Mapping[str, str] = field(default_factory=dict)  # variants that will not start here: why
    start_control: Any = None  # the pooled start-to-start variance cited (``startcontrol.StartVariance``)
    cited: dict[str, Any] | None = None
    note: str = ""
    given: Mapping[str, Verification] = field(default_factory=dict)  # variants on servers the user runs
    model_match: str | None = None  # how the given servers were matched to the run's model
    engine_read: dict[str, Any] | None = None  # a user's checkpoint, checked before a GPU engine serves it

    def effective(self) -> dict[str, Any]:
        """run.json's ``effective``: every knob as run, placement, dtype and why, the cited control, the servers
        given."""
        servers = {n: v.url for n, v in self.given.items()}
        return {**config_dict(self.cfg), "backend": self.placement.backend, "runtime": self.placement.runtime,
                "notice": self.placement.notice, **self.dtype.record(),
                **context_record(self.requested, self.cfg, self.model),
                **({CITED_KEY: self.cited} if self.cited else {}),
                **({"servers_given": servers, "servers_given_model_match": self.model_match} if servers else {}),
                **({"checkpoint_engine_read": self.engine_read} if self.engine_read else {})}

    def notices(self) -> list[str]:
        """What the run says before it starts: the placement's notice, the cited control, variants refused here."""
        refused = [f"server {n}: capability_missing here, not started: {why}" for n, why in self.refused.items()]
        return [line for line in (self.placement.notice, self.note, *refused) if line]

    def unverified(self) -> list[str]:
        """One line per given server with a setting no one checked: an ``expect``ed one its engine does not expose,
        or a variant's settings the spec declares no ``expect`` for (the kit cannot know the server holds them)."""
        lines = [f"server {n}: {', '.join(v.unverified)} could not be verified (the engine at {v.url} exposes no "
                 f"effective configuration for it)" for n, v in self.given.items() if v.unverified]
        undeclared = [v for v in self.plan.servers if v.name in self.given and v.settings and not v.expect]
        return lines + [f"server {v.name}: its settings ({', '.join(sorted(v.settings))}) are not checked on the "
                        f"server at {self.given[v.name].url}: the spec declares no expect for them" for v in undeclared]


def resolve(spec: BenchSpec, cfg: BenchConfig, *, root: Path, progress: Progress, model_of: ModelOf,
            backend_of: BackendOf, dry: bool = False) -> ResolvedRun:
    """The run of ``spec`` at ``cfg``, checked before anything is built or started (module docstring). ``dry``: for
    ``--dry-run``, which writes nothing and sends nothing: no run target, no request to a given server, no cited
    start control; ``model_of`` then only finds a model that needs no setup."""
    if not dry:
        check_run_target(root / spec.out_root(cfg), None, sign=cfg.sign, root=root, flag="--out-root")
    placement = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime)
    endpoints = parse_endpoints(cfg.server)
    audit_citations(cfg, root)
    early = early_plan(spec, cfg)  # with a model already in the cache: the whole plan checked before any setup
    served = reach(early[1] if early else None, endpoints, cfg.model) if not dry else {}
    requested = config_dict(cfg)
    dtype = choose_dtype(placement.backend, host_isa(), cfg.dtype)
    cfg = replace(cfg, dtype=dtype.dtype)  # every server the bench starts serves this dtype unless a variant says
    model = model_of(cfg.model, progress=progress)
    cfg = fit_to_model(cfg, model)  # the server's context no longer than the model's
    plan = early[1] if early and early[0].path == model.path else checked_plan(spec, cfg, model)
    served = reach(plan, endpoints, cfg.model) if not (early or dry) else served
    match = same_model(served, str(model.path)) if served else None
    plan, refused = prepare_started(plan, set(endpoints), placement, base_config(cfg, placement, model), backend_of)
    start, cited, note = (None, None, "") if dry else start_control_for(spec.semantic_id, cfg.aa_control, root,
                                                                        placement.backend, model, cfg)
    given = {n: verify(n, s, backend_of(plan.server(n).backend or placement.backend), plan.server(n).expect,
                       reset=plan.reset_prefix_cache) for n, s in served.items()}
    refused = {**refused, **given_refusals(plan, given)}
    if plan.servers and all(v.name in refused for v in plan.servers):
        name = plan.servers[0].name
        raise InvalidInput(f"bench-{spec.name}: no server variant can run here ({name}: "
                           f"{refused[name].splitlines()[0]}{' …' if len(refused) > 1 else ''})")
    started = any(v.name not in endpoints and v.name not in refused for v in plan.servers)
    engine_read = check_user_checkpoint(Path(model.path)) if (
        started and isinstance(model, LocalCheckpoint) and placement.backend in GPU_BACKENDS) else None
    return ResolvedRun(spec=spec, cfg=cfg, requested=requested, placement=placement, dtype=dtype, model=model,
                       plan=plan, refused=refused, start_control=start, cited=cited, note=note, given=given,
                       model_match=match, engine_read=engine_read)


def audit_citations(cfg: BenchConfig, root: Path) -> None:
    """Every manifest a knob cites by path, audited before the model or anything else (the spec reads what it needs
    of each later): a missing, garbage, INVALID or other-bench manifest is one line naming its flag."""
    for name, path, semantic_id in cited_paths(cfg):
        try:
            cite(path, root, semantic_id=semantic_id)
        except InvalidInput as exc:
            raise InvalidInput(f"{name}: {exc.message}", hint=exc.hint) from None


def prepare_started(plan: Plan, given: set[str], placement: Placement, base: BackendConfig,
                    backend_of: BackendOf) -> tuple[Plan, dict[str, str]]:
    """The plan with the variants the kit starts placed on their devices (``launch.prepare``), and those refused
    before any start; a variant on a server the user runs has no command line to place or gate."""
    started = replace(plan, servers=tuple(v for v in plan.servers if v.name not in given))
    placed, refused = prepare(started, placement, base, lambda v: backend_of(v.backend or placement.backend),
                              model_dir_of)
    return replace(plan, servers=tuple(next((p for p in placed.servers if p.name == v.name), v)
                                       for v in plan.servers)), refused


def reach(plan: Plan | None, endpoints: Mapping[str, str], model: str) -> dict[str, Served]:
    """Every given endpoint answers and serves its variant's model (the bench's, or the variant's own); without a
    plan yet, only that it answers. A name that is not a server variant of the plan is an input error."""
    if plan is not None:
        names = [v.name for v in plan.servers]
        unknown = [n for n in endpoints if n not in names]
        if unknown:
            raise InvalidInput(f"--server {unknown[0]}: not a server variant of this run (its variants: "
                               f"{', '.join(names)})")
    return {n: check_endpoint(n, url, (plan.server(n).model or model) if plan else None)
            for n, url in endpoints.items()}


def restarted(plan: Plan) -> set[str]:
    """Server variants the schedule starts more than once (stopped by one phase, started again by a later one)."""
    live: set[str] = set()
    seen: set[str] = set()
    again: set[str] = set()
    for phase in plan.phases:
        live &= set(phase.keep) & set(phase.servers)
        again |= (set(phase.servers) - live) & seen
        seen |= set(phase.servers)
        live |= set(phase.servers)
    return again


def given_refusals(plan: Plan, given: Mapping[str, Verification]) -> dict[str, str]:
    """What the given servers cannot run of the plan: an optional variant's reason (capability_missing); a
    required variant's is an input error, before any measurement."""
    out = {}
    restarts = restarted(plan)
    for name, v in given.items():
        why = v.mismatch()
        if why is None and name in restarts:
            why = (f"server {name} at {v.url}: the schedule restarts it ({plan.order}), and the kit cannot restart "
                   "a server it did not start")
        caching = lookup(v.effective, "cache_config.enable_prefix_caching")
        if why is None and v.reset is not None and not v.reset.requested and caching is not False:
            why = (f"server {name} at {v.url}: the protocol resets the prefix cache before every arm run, and the kit "
                   f"cannot: {v.cannot[-1]}")
        if why is None:
            continue
        if not plan.server(name).optional:
            raise InvalidInput(why)
        out[name] = why
    return out
