"""What a bench's plan promises before it runs and what its run record says of the protocol it kept.

``checked_plan`` builds the spec's plan (its citations audited as it is built) on settings fitted to the model's
config (``harness.bench.modelfit``) and holds it to the rules a run needs (consistent names, an arm to run,
workloads ``infkit workload make`` would write); ``early_plan`` does it before any setup, on the user's checkpoint
or a catalog model already prepared. ``protocol_record`` is run.json's protocol; a prefix-cache reset the engine
declined is a protocol violation.
"""

from __future__ import annotations

from typing import Any

from harness.bench.modelfit import check_chat, fit_to_model
from harness.bench.spec import BenchConfig, BenchSpec, InputFile, Plan, WorkloadPlan
from harness.errors import InvalidInput
from harness.models import PreparedModel
from harness.models.resolve import find_resolved
from harness.workload import check_options


def protocol_record(cfg: BenchConfig, plan: Plan, resets: list[dict[str, Any]],
                    realisations: list[dict[str, Any]] | None = None,
                    reruns: dict[str, Any] | None = None) -> dict[str, Any]:
    """run.json's protocol: repeats, order, warm-up, the prefix-cache resets, per arm run the workload
    realisation it replayed (``harness.bench.realisation``), and the invalid runs re-run (``harness.bench.invalid``)."""
    return {
        "repeats": cfg.repeats,
        "order": plan.order,
        "warmup_requests_per_server_start": cfg.warmup_requests if plan.warmup_name else 0,
        "prefix_cache_reset_before_each_arm_run": plan.reset_prefix_cache,
        "prefix_cache_resets": {
            "before_arm_runs": len(resets),
            "confirmed": sum(r["confirmed"] is True for r in resets),
            "unconfirmed": sum(r["requested"] and r["confirmed"] is None for r in resets),
            "not_offered": sum(not r["requested"] for r in resets),
            "declined": [r for r in resets if r["requested"] and r["confirmed"] is False],
        },
        "ignore_eos": plan.ignore_eos,
        "fresh_arrivals_per_repeat": plan.fresh_arrivals,
        "arrival_realisations": list(realisations or []),
        "reruns": reruns or {"budget": 0, "used": 0, "runs": [], "stopped_early": None},
        "notes": list(plan.notes),
    }


def protocol_violations(protocol: dict[str, Any]) -> list[str]:
    """A reset the engine declined before an arm run breaks the protocol: that arm did not start from an empty cache."""
    return [
        f"protocol violation: prefix cache not reset before {r['arm']} repeat {r['repeat']} on server "
        f"{r['server']} ({r['evidence']})"
        for r in protocol["prefix_cache_resets"]["declined"]
    ]


def checked_plan(spec: BenchSpec, cfg: BenchConfig, model: PreparedModel) -> Plan:
    """The spec's plan (citations audited as it is built), its consistency, an arm to run, and every workload's
    parameters held to what ``infkit workload make`` allows."""
    cfg = fit_to_model(cfg, model)
    plan = spec.plan(cfg, model).with_warmup(cfg.warmup_requests, cfg.seed)
    plan.check()
    check_chat(plan.arms, model)
    if not plan.arms and not any(callable(p.steps) for p in plan.phases):  # sweeps and searches make their arms
        raise InvalidInput(f"bench-{spec.name}: these settings leave no arm to run", hint="see --help")
    made = [*plan.workloads, *(a.workload for a in plan.arms if isinstance(a.workload, WorkloadPlan))]
    for w in made:
        if not any(isinstance(v, InputFile) for v in w.options.values()):
            check_options(w.kind, w.common, dict(w.options))
    return plan


def early_plan(spec: BenchSpec, cfg: BenchConfig) -> tuple[PreparedModel, Plan] | None:
    """The checked plan on the model when it needs no setup (the user's checkpoint, or a catalog model already
    prepared), or None when a catalog model is not prepared yet. A bad checkpoint or a missing id raises here."""
    cached = find_resolved(cfg.model)
    return (cached, checked_plan(spec, cfg, cached)) if cached is not None else None
