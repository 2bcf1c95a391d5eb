"""``infkit bench NN --dry-run``: the whole plan as one JSON document, starting nothing and writing nothing.

The same flags as a run, resolved by the same step (``harness.bench.resolve``, short of preparing a model, sending
to a given server or citing a start control); placements as a GPU host
with a container engine would resolve them (so ``--gpu 0,1`` plans the GPU path on a laptop); one entry per
server process the bench would start (group members included) with its exact argv, environment (secret values
masked), devices, memory share and, where the selected engine release cannot run it, the reason it would be
``capability_missing``; under docker each process's image source (lock digest, local build, or a build on first
use, with what getting it reaches: registry, PyPI) and its mounts with their options; the setup steps before the
first start and what each needs beyond this host (``needs``: empty where the checkpoint is present and the image
is pulled by digest); the sets of servers up at the same time; the arms in run order. Ports are placeholders
(a run picks free ports at each start); a variant's own model that is not prepared yet is named, not made.
Needs the bench's prepared model (``make model``), nothing else: no GPU, engine or container runtime."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.backends import get_backend
from harness.bench.devices import SHARE_LIMIT, co_resident
from harness.bench.launch import (
    FIRST_PORT,
    base_config,
    image_sources_of,
    launch_entries,
    members_of,
    model_dir_of,
    variant_config,
)
from harness.bench.placement import planning
from harness.bench.resolve import resolve, restarted
from harness.bench.spec import BenchConfig, BenchSpec, Plan
from harness.errors import InvalidInput
from harness.knobs import config_dict
from harness.runtime.docker_image import ImageSource
from harness.serving.given import parse_endpoints

DRY_RUN_SCHEMA = "infkit.bench.dry-run/1"


def setup_steps(model: Any, images: dict[str, ImageSource]) -> list[dict[str, Any]]:
    """What a run does before its first start, and what each step reaches beyond this host: the model is read from
    its stamp (present: nothing is fetched), each role's image comes from its source (``ImageSource``)."""
    steps: list[dict[str, Any]] = [{"step": "model", "what": f"{model.key}: prepared at {model.path}, read from its "
                                    "stamp (nothing converted or downloaded)", "needs": []}]
    for role, image in images.items():
        what = {"override": f"run {image.ref} (INFKIT_IMAGE), held by the engine",
                "local build": f"run the local build {image.ref}",
                "registry": f"run {image.ref}, pulled by digest where the engine lacks it",
                "build": f"build {image.ref} on first use from {image.base}, its Python packages hash-locked"}
        steps.append({"step": f"image {role}", "what": what[image.source], "needs": list(image.needs),
                      "missing": image.missing})
    return steps


def run_order(plan: Plan) -> list[dict[str, Any]]:
    """Each phase's servers and its steps: (repeat, arm, server) when fixed, else the arms it chooses among."""
    out = []
    for phase in plan.phases:
        entry: dict[str, Any] = {"phase": phase.name, "servers": list(phase.servers), "keep": list(phase.keep)}
        if callable(phase.steps):
            entry["steps"] = None
            entry["planned_steps"] = phase.planned_steps
            entry["arms"] = [a.label for a in plan.arms if a.server in phase.servers]
            entry["chosen_while_running"] = True
        else:
            entry["steps"] = [{"repeat": r, "arm": a.label, "server": a.server, "workload": a.workload_name}
                              for r, a in phase.steps]
        out.append(entry)
    return out


def given_entries(plan: Plan, endpoints: dict[str, str]) -> list[dict[str, Any]]:
    """One entry per variant on a server the user runs: where, what is checked there before measuring, and what the
    kit cannot do to it (checked against the server itself when the run is resolved)."""
    unknown = [n for n in endpoints if n not in {v.name for v in plan.servers}]
    if unknown:
        raise InvalidInput(f"--server {unknown[0]}: not a server variant of this run (its variants: "
                           f"{', '.join(v.name for v in plan.servers)})")
    restarts = restarted(plan)
    return [{"name": v.name, "variant": v.name, "role": "given", "started_by": "user", "endpoint": endpoints[v.name],
             "checks": ["GET /v1/models serves the run's model", *(f"{k} == {x!r}" for k, x in v.expect.items())],
             "kit_cannot": ["restart it", *(["reset its prefix cache unless it offers a reset endpoint"]
                                           if plan.reset_prefix_cache else [])],
             "refused": ("the schedule restarts it, and the kit cannot restart a server it did not start"
                         if v.name in restarts else None), "optional": v.optional}
            for v in plan.servers if v.name in endpoints]


def prepared_only(name: str, progress: Any = None) -> Any:
    """The model a dry run reads: one that needs no setup (a checkpoint directory, or a catalog model prepared)."""
    from harness.models.resolve import find_resolved

    model = find_resolved(name)
    if model is None:
        raise InvalidInput(f"model {name} is not prepared: a dry run reads its checkpoint's config",
                           hint=f"infkit model prepare {name} (make model)")
    return model


def dry_run(spec: BenchSpec, cfg: BenchConfig) -> dict[str, Any]:
    """The resolved run of ``spec`` at ``cfg`` (``harness.bench.resolve``) as a JSON-ready document (module
    docstring)."""
    with planning():
        run = resolve(spec, cfg, root=Path.cwd(), progress=lambda _line: None, model_of=prepared_only,
                      backend_of=get_backend, dry=True)
        cfg, plan, placement, model, refused = run.cfg, run.plan, run.placement, run.model, dict(run.refused)
        endpoints = parse_endpoints(cfg.server)
        base = base_config(cfg, placement, model)
        backend_of = lambda v: get_backend(v.backend or placement.backend)  # noqa: E731
        started = replace(plan, servers=tuple(v for v in plan.servers if v.name not in endpoints))
        images = image_sources_of(started, placement, backend_of)
        servers = given_entries(plan, endpoints)
        for i, variant in enumerate(plan.servers):
            if variant.name in endpoints:
                continue
            backend = get_backend(variant.backend or placement.backend)
            config = variant_config(base, variant, model_dir_of(variant), FIRST_PORT + 10 * i)
            if variant.name in refused and "gpus" not in variant.settings:  # not placed: shown on every device offered
                config = replace(config, gpus=placement.gpus)
            servers += launch_entries(backend, members_of(backend, config, variant), variant, placement,
                                      refused.get(variant.name), images.get(backend.role))
    return {"schema": DRY_RUN_SCHEMA, "bench": spec.name, "semantic_id": spec.semantic_id,
            "requested": config_dict(cfg),
            "placement": {"backend": placement.backend, "runtime": placement.runtime, "gpus": list(placement.gpus),
                          "notice": placement.notice, "share_limit": SHARE_LIMIT if placement.gpus else None},
            "setup": (setup := setup_steps(model, images)),
            "needs": sorted({need for step in setup for need in step["needs"]}),
            "servers": servers, "co_resident": [list(s) for s in co_resident(plan)],
            "refused": refused, "order": plan.order, "arms": run_order(plan), "notes": list(plan.notes)}
