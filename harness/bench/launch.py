"""The processes a plan's server variants would start, decided before any start.

``prepare`` places every variant on the devices GPU= selects (``harness.bench.devices``) and asks the
selected engine's known limits (``harness.backends.gating``) about each exact command line: a variant
the engine cannot start, or that does not fit the devices, is ``capability_missing`` with its reason
before anything starts (a required one is an input error). ``launches`` lists one entry per process —
group members included — as ``infkit bench NN --dry-run`` prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.backends import Backend, BackendConfig
from harness.backends.gating import refusal
from harness.backends.layouts import nodes_group, replica_specs
from harness.bench.devices import place, placed_plan
from harness.bench.placement import Placement, planning_only
from harness.bench.spec import Plan, ServerVariant
from harness.errors import InvalidInput
from harness.runtime.base import ServerSpec
from harness.runtime.docker_image import ImageSource

FIRST_PORT = 8000  # the dry run's ports stand in for the free ports a run picks at each start


@dataclass(frozen=True)
class Member:
    """One process of a variant: its name (the variant's, or ``variant/member``), role and exact spec."""

    name: str
    role: str
    spec: ServerSpec


def base_config(cfg: Any, placement: Placement, model: Any) -> BackendConfig:
    """Every server's configuration before its variant's settings: the bench's knobs and GPU='s devices."""
    return BackendConfig(model_dir=str(model.path), served_model_name=cfg.model, port=0, seed=cfg.seed,
                         kv_cache_space_gib=cfg.kv_cache_space_gib, max_model_len=cfg.max_model_len,
                         dtype=cfg.dtype or "auto", in_container=placement.runtime == "docker", gpus=placement.gpus,
                         enforce_eager=cfg.enforce_eager)


def model_dir_of(variant: ServerVariant) -> str | None:
    """The prepared directory of a variant's own model, found without preparing it (None: not prepared yet)."""
    if not variant.model:
        return None
    from harness.models import find_model

    try:
        found = find_model(variant.model)
    except InvalidInput:  # a derived model find_model does not look up: made at the variant's start
        found = None
    return str(found.path) if found else f"<{variant.model}: prepared at the start>"


def variant_config(base: BackendConfig, variant: ServerVariant, model_dir: str | None, port: int) -> BackendConfig:
    served: dict[str, Any] = ({"model_dir": model_dir, "served_model_name": variant.model}
                              if variant.model and model_dir else {})
    return replace(base, port=port, **served, **variant.settings)


def members_of(backend: Backend, config: BackendConfig, variant: ServerVariant) -> list[Member]:
    """The engine processes of ``variant`` (a Ray layout's: its replicas; the Ray nodes carry no engine flags)."""
    layout = variant.layout
    if layout is None:
        return [Member(variant.name, "server", backend.server_spec(config))]
    if layout.kind == "nodes":
        group = nodes_group(backend, config, layout, config.port + 100)
        return [Member(f"{variant.name}/{m.name}", m.role, m.spec) for m in group.members]
    ports = [config.port + i for i in range(layout.count)]
    return [Member(f"{variant.name}/replica{i}", "replica", s)
            for i, s in enumerate(replica_specs(backend, config, layout, ports, node_env=layout.kind == "ray"))]


def engine_refusal(backend: Backend, members: list[Member], variant: ServerVariant, runtime: str) -> str | None:
    kind = variant.layout.kind if variant.layout else None
    return next((r for m in members
                 if (r := refusal(backend.name, backend.version(), m.spec.argv, runtime=runtime, layout=kind))), None)


def image_sources_of(plan: Plan, placement: Placement,
                     backend_of: Callable[[ServerVariant], Backend]) -> dict[str, ImageSource]:
    """Each docker role's image source before any start (a dry run does not ask the engine: a fresh host)."""
    if placement.runtime != "docker":
        return {}
    from harness.runtime.docker import engine_api, image_sources

    roles = [backend_of(v).role for v in plan.servers]
    return image_sources(roles, bool(placement.gpus), api=None if planning_only() else engine_api())


def prepare(plan: Plan, placement: Placement, base: BackendConfig, backend_of: Callable[[ServerVariant], Backend],
            model_dir_of: Callable[[ServerVariant], str | None]) -> tuple[Plan, dict[str, str]]:
    """The plan placed on GPU='s devices, and the variants refused before any start (name -> reason): no device,
    no image to be had (lock digest, PULL_ONLY, base digest, podman with GPUs), or what the engine release lacks."""
    placed = place(plan, placement.gpus, base.gpu_memory_utilization) if placement.gpus else {}
    plan = placed_plan(plan, placed)
    refused = {n: p.refused for n, p in placed.items() if p.refused}
    images = image_sources_of(plan, placement, backend_of)
    for variant in plan.servers:
        if variant.name in refused:
            continue
        backend = backend_of(variant)
        if (image := images.get(backend.role)) and image.missing:
            refused[variant.name] = f"{backend.name} image {image.role}: {image.missing}" + (
                f" ({image.hint})" if image.hint else "")
            continue
        config = variant_config(base, variant, model_dir_of(variant), FIRST_PORT)
        reason = engine_refusal(backend, members_of(backend, config, variant), variant, placement.runtime)
        if reason:
            refused[variant.name] = f"{backend.name} {backend.version()}: {reason}"
    required = [n for n in refused if not plan.server(n).optional]
    if required:
        raise InvalidInput(f"server variant {required[0]} cannot start here: {refused[required[0]]}")
    return plan, refused


def masked(env: dict[str, str]) -> dict[str, str]:
    """An environment as printed: values of names that look secret are masked."""
    secret = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
    return {k: ("***" if any(s in k.upper() for s in secret) and v not in ("", "disabled") else v)
            for k, v in env.items()}


def launch_entries(backend: Backend, members: list[Member], variant: ServerVariant, placement: Placement,
                   refused: str | None, image: ImageSource | None) -> list[dict[str, Any]]:
    from harness.runtime.docker import planned_mounts

    share = variant.settings.get("gpu_memory_utilization") if placement.gpus else None
    return [{"name": m.name, "variant": variant.name, "role": m.role, "backend": backend.name,
             "engine_version": backend.version(), "runtime": placement.runtime,
             "image": image.record() if image else None, "venv": None if image else backend.native_python(),
             "mounts": planned_mounts(m.spec.argv, m.spec.host_network) if image else None,
             "argv": list(m.spec.argv), "env": masked(dict(m.spec.env)), "gpus": list(m.spec.gpus),
             "gpu_memory_utilization": share if m.spec.gpus else None,
             "host_network": m.spec.host_network, "optional": variant.optional, "refused": refused}
            for m in members]
