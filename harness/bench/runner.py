"""The one runner of every bench spec.

``run_bench`` resolves the run first (``harness.bench.resolve``: placement, dtype, model, the checked plan,
citations, the servers the user runs, each verified), then executes it: the run directory, workloads, server
starts per phase (warm-up after each start, the prefix cache reset before each arm run) or the given servers
(never started or stopped here), the arm runs (an invalid one redone: ``harness.bench.invalid``), Ctrl-C, a server
that dies or does not start — then the reading, the top-level result (built and validated once), the summary,
figures, run.json and the signed manifest.

Failure rules: a failed arm run (e.g. the server died) stops the bench, keeps every completed request and blocks the
decision. A server variant the spec marks optional that the engine refuses to start is recorded as
``capability_missing`` with the engine's own message, and the bench goes on without its arms. After every start the
engine's effective settings are read back (servers.json, each arm's result); a variant whose ``expect``ed settings
the engine did not apply is stopped at once and is ``capability_missing`` too (requested vs effective, and the
engine's reason where known). Ctrl-C keeps what was measured and signs it as an aborted run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from harness.backends import Backend, get_backend
from harness.bench.analysis import claim_figures, read_claims, top_result
from harness.bench.arms import ArmContext, arm_dir, measure_arm, warm_up
from harness.bench.invalid import Reruns
from harness.bench.launch import base_config
from harness.bench.outputs import arm_table, summary_text
from harness.bench.planning import protocol_record, protocol_violations
from harness.bench.realisation import realisation_entry, realised
from harness.bench.records import ArmRun, Workload
from harness.bench.resolve import ResolvedRun, resolve
from harness.bench.runfile import Origin
from harness.bench.sendlag import pooled_send_lag
from harness.bench.spec import Arm, BenchConfig, BenchSpec, History, InputFile, WorkloadPlan
from harness.bench.startcontrol import CITED_KEY
from harness.client import read_records
from harness.contract import Failure, Result, read_result
from harness.errors import InvalidInput
from harness.models import resolve_model
from harness.progress import Reporter
from harness.rundir.directory import Finished, RunDirectory
from harness.rundir.record import native_image
from harness.runtime.base import ServerStartError, get_runtime
from harness.runtime.local import free_port
from harness.serving.given import given_session
from harness.serving.measure import REQUESTS_FILE, RESULT_FILE
from harness.serving.session import (
    NotApplied,
    ServerSession,
    check_applied,
    engine_reason,
    kv_cache_config,
    server_session,
)
from harness.workload import make_workload, write_workload


@dataclass(frozen=True)
class BenchOutcome:
    spec: BenchSpec
    run_dir: Path
    result: dict[str, Any]
    finished: Finished
    failed: bool
    aborted: bool = False


class Stop(Exception):
    """Ends the schedule: a failed arm run, a required server that did not start, or Ctrl-C."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class Servers:
    """Live server variants: each started on first use (then warmed up), stopped when a phase that
    does not keep it begins, when its phase no longer needs it, or when the bench ends."""

    def __init__(self, bench: Bench):
        self.bench = bench
        self.live: dict[str, tuple[ServerSession, ExitStack]] = {}

    def get(self, name: str) -> ServerSession:
        if name not in self.live:
            own = ExitStack()
            try:
                self.live[name] = (self.bench.start(name, own), own)
            except BaseException:
                own.close()  # a server that started but failed its warm-up is stopped too
                raise
        return self.live[name][0]

    def keep_only(self, names: Iterable[str]) -> None:
        """Stop every live server not in ``names`` (the latest started first)."""
        keep = set(names)
        for name in [n for n in reversed(self.live) if n not in keep]:
            self.live.pop(name)[1].close()


class Bench:
    """One execution of a resolved run (``harness.bench.resolve``): its plan, run directory, history and servers."""

    def __init__(self, run: ResolvedRun, rd: RunDirectory, reporter: Reporter):
        self.run = run
        spec, cfg, placement, model, plan = run.spec, run.cfg, run.placement, run.model, run.plan
        self.spec, self.cfg, self.placement, self.model, self.plan = spec, cfg, placement, model, plan
        self.rd, self.reporter = rd, reporter
        self.history = History(cfg=cfg, model=model, run_dir=rd.path)
        self.runtime = get_runtime(placement.runtime)
        self.servers: dict[str, dict[str, Any]] = self.history.servers
        self.kv_cache: dict[str, dict[str, Any] | None] = {}
        self.resets: list[dict[str, Any]] = []  # one per arm run: the reset the protocol asks for, and its verdict
        self.realisations: list[dict[str, Any]] = []  # one per arm run: the workload file it replayed
        self.reruns = Reruns.before_start(cfg, reporter, rd.record.effective, plan)  # host load read; runs redone
        self.refused = self.history.refused  # dynamic steps can skip arms that pair with a refused variant
        self.ctx = ArmContext(semantic_id=spec.semantic_id, run_id=rd.run_id, run_dir=rd.path, model=model,
                              request_timeout_s=cfg.request_timeout_s, runtime=placement.runtime,
                              ignore_eos=plan.ignore_eos, client={"usd_per_gpu_hour": cfg.usd_per_gpu_hour})
        self.base = base_config(cfg, placement, model)  # GPU='s devices reach every server's config

    def backend_of(self, name: str) -> Backend:
        return get_backend(self.plan.server(name).backend or self.placement.backend)

    def workload(self, plan: WorkloadPlan) -> Workload:
        if plan.name not in self.history.workloads:
            options = {k: self.rd.write_text(f"workloads/inputs/{v.name}", v.text) if isinstance(v, InputFile) else v
                       for k, v in plan.options.items()}
            made = make_workload(plan.kind, plan.common, options, self.model.path)
            path = write_workload(self.rd.file(f"workloads/{plan.name}.jsonl"), made)
            self.history.workloads[plan.name] = Workload(path, made.workload_id, len(made.requests))
        return self.history.workloads[plan.name]

    def workload_of(self, arm: Arm, repeat: int = 1) -> Workload:
        """The arm's workload as ``repeat`` replays it (its own arrival draw: ``harness.bench.realisation``)."""
        named = arm.workload if isinstance(arm.workload, WorkloadPlan) else None
        plan = named or next(w for w in self.plan.workloads if w.name == arm.workload)
        made = self.workload(realised(plan, repeat, self.plan.fresh_arrivals))
        self.realisations.append(realisation_entry(plan, repeat, arm.label, made, str(made.path.relative_to(
            self.rd.path)), self.plan.fresh_arrivals))
        return made

    def start(self, name: str, stack: ExitStack) -> ServerSession:
        variant = self.plan.server(name)
        backend = self.backend_of(name)
        if name in self.run.given:
            return self.use_given(name, stack)
        model = resolve_model(variant.model, progress=self.reporter) if variant.model else None
        served: dict[str, Any] = {"model_dir": str(model.path), "served_model_name": variant.model} if model else {}
        config = replace(self.base, port=free_port(), **served, **variant.settings)
        self.reporter.state(f"server {name}: starting")
        with ExitStack() as own:  # a variant the engine did not apply is stopped at once, not at the phase's end
            srv = own.enter_context(server_session(
                name, backend, self.runtime, config, self.rd.path / "servers", start_timeout_s=self.cfg.start_timeout_s,
                progress=self.reporter, settings=dict(variant.settings), on_start=self.record_server,
                on_stop=self.record_server, layout=variant.layout, model=model))
            srv.read_effective(variant.expect)
            self.record_server(srv)
            check_applied(variant.expect, srv)
            self.warm(srv)
            stack.enter_context(own.pop_all())
        self.reporter.state(f"server {name}: up")
        return srv

    def use_given(self, name: str, stack: ExitStack) -> ServerSession:
        """A variant on a server the user runs: its settings read again at first use, the same warm-up as a start."""
        variant, checked = self.plan.server(name), self.run.given[name]
        config = replace(self.base, **variant.settings)  # what the variant stands for; the server's own: effective
        with ExitStack() as own:
            srv = own.enter_context(given_session(
                name, self.backend_of(name), config, checked, self.rd.path / "servers", progress=self.reporter,
                on_start=self.record_server, on_stop=self.record_server))
            srv.read_effective(variant.expect)
            self.record_server(srv)
            check_applied({k: v for k, v in variant.expect.items() if k not in checked.unverified}, srv)
            self.warm(srv)
            stack.enter_context(own.pop_all())
        return srv

    def warm(self, srv: ServerSession) -> None:
        if self.plan.warmup_name is not None:
            warmup = next(w for w in self.plan.workloads if w.name == self.plan.warmup_name)
            warm_up(self.ctx, srv, self.workload(warmup), self.reporter)

    def record_server(self, srv: ServerSession) -> None:
        """servers.json: each server's exact command, version, settings, pid and exit status, kept current."""
        entry = srv.record()
        entry["kv_cache"] = self.kv_cache.get(srv.name)
        self.servers[srv.name] = entry
        self.rd.write_json("servers/servers.json", {"servers": list(self.servers.values()),
                                                    "refused": self.refused})

    def run_step(self, servers: Servers, repeat: int, arm: Arm, index: int, total: int | None,
                 attempt: int = 1) -> ArmRun:
        srv = servers.get(arm.server)
        workload = self.workload_of(arm, repeat)
        self.reporter(f"[{index}/{total or '?'}] {arm.label} repeat {repeat}{f', attempt {attempt}' * (attempt > 1)}")
        if self.plan.reset_prefix_cache:
            reset = srv.reset_prefix_cache()
            self.resets.append({"arm": arm.label, "repeat": repeat, "server": srv.name, **reset.to_dict()})
            if reset.requested and reset.confirmed is False:
                self.reporter(f"  protocol violation: server {srv.name} did not drop its prefix cache before "
                              f"{arm.label} repeat {repeat}: {reset.evidence}")
        self.reporter.state(f"server {srv.name}: serving {arm.label}")
        t0 = time.monotonic()
        out = arm_dir(self.rd.path, arm.label, repeat, attempt)
        try:
            outcome = measure_arm(self.ctx, srv, workload, out, arm.label, arm.client, self.reporter)
        except KeyboardInterrupt:
            if (out / RESULT_FILE).is_file():  # measure wrote the interrupted arm's result: keep it in the run
                self.history.runs.append(ArmRun(label=arm.label, repeat=repeat, result_path=out / RESULT_FILE,
                                                result=read_result(out / RESULT_FILE),
                                                records=tuple(read_records(out / REQUESTS_FILE)),
                                                server=srv.name, workload=workload.path.stem,
                                                seconds=time.monotonic() - t0))
            raise
        if srv.name not in self.kv_cache and outcome.metrics_before_path is not None:
            self.kv_cache[srv.name] = kv_cache_config(outcome.metrics_before_path)
        result = Result.from_dict(outcome.result, str(outcome.result_path))
        run = ArmRun(label=arm.label, repeat=repeat, result_path=outcome.result_path, result=result,
                     records=outcome.records, server=srv.name, workload=workload.path.stem,
                     seconds=time.monotonic() - t0)
        self.reporter.step_done(run.seconds)
        return run

    def execute(self) -> Failure | None:
        """Every phase in order; the failure that stopped the schedule, if any."""
        plan, history = self.plan, self.history
        total = sum(sum(a.server not in self.refused for _, a in p.steps) if not callable(p.steps)  # refused: never run
                    else (p.planned_steps or 0) for p in plan.phases) or None
        self.reporter.begin(total, f"{len(plan.phases)} phase(s), {total or 'a number of'} arm runs")
        index = 0
        servers = Servers(self)
        try:
            for phase in plan.phases:
                servers.keep_only(set(phase.keep) & set(phase.servers))
                steps = phase.steps(history) if callable(phase.steps) else phase.steps
                for repeat, arm in steps:
                    if arm.server in self.refused:
                        continue
                    if phase.still_needed is not None:
                        servers.keep_only({arm.server, *phase.still_needed(history)})
                    index += 1
                    try:
                        run = self.run_step(servers, repeat, arm, index, total)
                    except ServerStartError as exc:
                        self.refuse(arm.server, exc)
                        continue
                    if phase.rerun or not callable(phase.steps):  # fixed: an invalid run is redone in its place
                        run = self.reruns.settle(run, partial(self.run_step, servers, repeat, arm, index, total))
                    history.runs.append(run)
                    if self.reruns.failure is not None:  # the budget was spent: stop early with the reason
                        return self.reruns.failure
                    if run.failure:
                        self.reporter(f"  {arm.label} repeat {repeat} failed: {run.failure.kind}: "
                                      f"{run.failure.message}")
                        return replace(run.failure)
        except Stop as stop:
            return stop.failure
        except KeyboardInterrupt:
            if not history.runs:
                raise
            self.reporter("interrupted: writing and signing the arms already measured")
            return Failure(stage="run", kind="aborted", message="interrupted by the user")
        finally:
            servers.keep_only(())
        return None

    def refuse(self, name: str, exc: ServerStartError) -> None:
        """An optional variant the engine will not start (or not apply) is a recorded capability gap; any other
        is the end."""
        message, _, tail = str(exc).partition("\n")
        if isinstance(exc, NotApplied) and not self.plan.server(name).optional:
            raise Stop(Failure(stage="server_start", kind="capability_missing", message=f"server {name}: {message}"))
        if self.plan.server(name).optional:
            reason = engine_reason(self.logs_of(name)) or engine_reason(tail)
            self.refused[name] = f"{reason}\n{message}\n{tail[-2000:]}".strip()
            self.reporter(f"server {name}: refused by the engine here, recorded as capability_missing: {message}")
            return
        if not self.history.runs:
            raise exc  # nothing measured: the error and its log tail are the whole story
        self.reporter(f"server {name} did not start; keeping the arms already measured: {message}")
        raise Stop(Failure(stage="server_start", kind="server_crash", message=f"server {name}: {message}",
                           log_tail=tail or None))

    def logs_of(self, name: str) -> str:
        """Every log the server variant ``name`` wrote (its own, or each group member's), as servers.json lists them."""
        entry = self.servers.get(name) or {}
        logs = [entry.get("log"), *(m.get("log") for m in (entry.get("group") or {}).get("members", []))]
        paths = [self.rd.path / "servers" / log for log in dict.fromkeys(logs) if log]
        return "\n".join(p.read_text(errors="replace") for p in paths if p.is_file())

    def images(self) -> list[dict[str, Any]]:
        """Images the servers ran from (docker), else the native serving environment's package digest."""
        pulled = {(i["ref"], i["digest"], s["backend"]) for s in self.servers.values() if (i := s.get("image"))}
        if pulled:
            return [{"role": get_backend(b).role, "ref": ref, "digest": digest} for ref, digest, b in sorted(pulled)]
        backends = sorted({self.backend_of(s.name).name for s in self.plan.servers if s.name not in self.run.given})
        client = [native_image("infkit-client")] if self.run.given else []  # a given server's engine is the user's
        return [*(native_image(get_backend(b).role, get_backend(b).native_python()) for b in backends), *client]


def run_bench(spec: BenchSpec, cfg: BenchConfig, *, root: Path = Path("."), reporter: Reporter | None = None,
              origin: Origin | None = None) -> BenchOutcome:
    """Resolve the whole run (``harness.bench.resolve``), then execute it; the outcome says where everything is.
    ``origin``: the run file (copied into the run directory) and where each knob came from (run.json's requested)."""
    reporter = reporter or Reporter(name=f"bench-{spec.name}")
    started = time.monotonic()
    run = resolve(spec, cfg, root=root, progress=reporter, model_of=resolve_model, backend_of=get_backend)
    return execute(run, root=root, reporter=reporter, started=started, origin=origin or Origin())


def execute(run: ResolvedRun, *, root: Path, reporter: Reporter, started: float, origin: Origin) -> BenchOutcome:
    """Run what ``run`` says: its run directory, workloads, servers and arms, then the reading and the signature."""
    spec, cfg, plan = run.spec, run.cfg, run.plan
    for line in run.notices():
        reporter(line)
    rd = RunDirectory.create(root / spec.out_root(cfg), semantic_id=spec.semantic_id,
                             run_label=plan.run_label or spec.title, requested={**run.requested, **origin.record()},
                             root=root, sign=cfg.sign, effective=run.effective(), model=run.model.run_entry(),
                             tokenizer=run.model.tokenizer_ref)
    origin.copy_into(rd.path)
    shown = rd.path.relative_to(root) if rd.path.is_relative_to(root) else rd.path
    reporter(f"bench-{spec.name}: run {rd.run_id} -> {shown}")
    bench = Bench(run, rd, reporter)
    bench.history.start_control = run.start_control
    bench.refused.update(run.refused)  # decided before any start: devices, what the engine release lacks, given servers
    try:
        try:
            for w in plan.workloads:
                bench.workload(w)
            failure = bench.execute()
        finally:
            end = getattr(reporter, "end", None)
            if end:
                end()
        return finish(bench, failure, time.monotonic() - started)
    except BaseException as exc:  # nothing half-written: a run that measured nothing is kept only for its server logs
        rd.abandon(has_data=bool(bench.servers), error=exc)
        raise


def finish(bench: Bench, failure: Failure | None, wall_s: float) -> BenchOutcome:
    spec, cfg, plan, history, rd = bench.spec, bench.cfg, bench.plan, bench.history, bench.rd
    if not history.runs:
        raise InvalidInput("no arm completed a run: nothing to conclude", hint="see servers/servers.json")
    # runs too small to judge their send lag alone are judged over their arm's repeats pooled, before any reading
    history.runs[:], pooled = pooled_send_lag(history.runs)
    if plan.read is not None:
        reading = plan.read(history)
        if failure is not None:  # the spec's blocked/aborted step, not the rule's for what it read
            reading = reading.blocked_by(failure)
    else:
        reading = read_claims(
            history, plan, seed=cfg.seed, resamples=cfg.resamples, repeats=cfg.repeats, failure=failure
        ).with_figures(claim_figures(history, plan, spec.title))
    reading = reading.with_capability_missing(bench.refused)
    labels = list(dict.fromkeys([*(a.label for a in plan.arms), *(r.label for r in history.runs)]))
    cited = bench.rd.record.effective.get(CITED_KEY)
    cited = cited if isinstance(cited, dict) else None  # uncited, the key holds the --aa-control knob as given
    reading = reading.with_lines(cited["note"]) if cited else reading
    extra = {
        **({CITED_KEY: cited} if cited else {}), **({"send_lag_pooled": pooled} if pooled else {}),
        "servers": list(bench.servers.values()),
        "workloads": {
            k: {"path": str(w.path.relative_to(rd.path)), "workload_id": w.workload_id}
            for k, w in history.workloads.items()
        },
    }
    protocol = protocol_record(cfg, plan, bench.resets, bench.realisations, bench.reruns.record())
    reading = bench.reruns.named(reading, history.runs)
    # a protocol the run did not keep decides nothing, nor does a setting no one could verify
    reading = reading.capped_by([*protocol_violations(protocol), *bench.run.unverified()])
    result = top_result(history, plan, reading, semantic_id=spec.semantic_id, run_id=rd.run_id,
                        next_steps=spec.steps, protocol=protocol, extra=extra)
    result_name = f"{reading.kind}.json"
    rd.write_result(result_name, result)
    for name, draw in reading.figures.items():
        rd.figure(name, draw)
    summary = summary_text(spec.title, arm_table(history.runs, labels, plan.columns), reading,
                           Result.from_dict(result, result_name), wall_s)
    measured = {k for k in history.workloads if k != plan.warmup_name}
    aborted = failure is not None and failure.kind == "aborted"
    finished = rd.finish(
        summary=summary,
        result=result_name,
        evidence_level=result["conclusion"]["evidence_level"],
        decision=result["conclusion"]["decision"],
        status="aborted" if aborted else "failed" if failure else "completed",
        images=bench.images(),
        workload_ids=sorted({history.workloads[k].workload_id for k in measured}),
    )
    return BenchOutcome(spec=spec, run_dir=rd.path, result=result, finished=finished, failed=failure is not None,
                        aborted=aborted)
