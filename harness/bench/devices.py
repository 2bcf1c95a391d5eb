"""Which devices each server variant gets, and how co-resident servers split a device.

Rule: servers that are up at the same time (``co_resident``: a phase's servers; a phase that stops
servers as it goes keeps at most two up) get different devices when GPU= offers enough, least-loaded
device first; where they must share one, each process's memory share (vLLM's
``gpu_memory_utilization``, SGLang's ``--mem-fraction-static``) is at most ``SHARE_LIMIT`` divided by the
processes on its busiest device, so a device's shares never sum above ``SHARE_LIMIT``. A share a spec set
itself (bench-72 sizes it from a KV pool) is kept when the shares on its device still fit, and the
variant is refused otherwise. A variant whose ranks need more distinct devices than GPU= offers is
refused before any start. The result is a new plan whose variants carry ``gpus``, the share and, for a
layout, each member's devices; servers.json records them as the variant's settings.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.backends.gating import flag_value
from harness.bench.spec import History, Plan, ServerVariant
from harness.runtime.gpus import Device

SHARE_LIMIT = 0.9
PARALLEL_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size")


def alone(history: History) -> Iterable[str]:
    """A phase's ``still_needed`` that keeps nothing else up: its servers run one at a time."""
    return ()


@dataclass(frozen=True)
class Placed:
    """One variant's devices (per member for a layout) and memory share; or why it cannot be placed."""

    name: str
    member_gpus: tuple[tuple[Device, ...], ...] = ()
    share: float | None = None
    refused: str | None = None

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(dict.fromkeys(g for member in self.member_gpus for g in member))


def ranks(variant: ServerVariant) -> int:
    """Devices one engine process spans: the product of its parallel sizes."""
    args = tuple(variant.settings.get("extra_args") or ())
    return math.prod(int(flag_value(args, f) or 1) for f in PARALLEL_FLAGS)


def members(variant: ServerVariant) -> tuple[list[int], bool]:
    """Devices per process of the variant, and whether they must all differ (ranks of one engine)."""
    if variant.layout is None:
        return [ranks(variant)], True
    if variant.layout.kind == "nodes":  # one engine over the nodes: its ranks are split between them
        return [max(1, ranks(variant) // variant.layout.count)] * variant.layout.count, True
    return [ranks(variant)] * variant.layout.count, False  # independent replicas may share a device


def co_resident(plan: Plan) -> list[tuple[str, ...]]:
    """Sets of server variants that are up at the same time, in plan order."""
    sets: list[tuple[str, ...]] = []
    for phase in plan.phases:
        names = tuple(dict.fromkeys(phase.servers))
        if phase.still_needed is alone:
            sets += [(n,) for n in names]
        elif phase.still_needed is not None and len(names) > 2:  # the next step's server and one kept
            sets += list(itertools.combinations(names, 2))
        else:
            sets.append(names)
    return list(dict.fromkeys(sets))


def assign(variant: ServerVariant, devices: Sequence[Device], load: Counter) -> tuple[tuple[Device, ...], ...] | str:
    """Devices for each process of ``variant``, least-loaded first (``load`` is updated); a reason if too few."""
    sizes, distinct = members(variant)
    need = sum(sizes) if distinct else max(sizes)
    if need > len(devices):
        return (f"needs {need} devices at once, GPU= offers {len(devices)} "
                f"({','.join(map(str, devices))}): set GPU= to {need} device indexes")

    def least(taken: set[Device], n: int) -> list[Device]:
        free = sorted((d for d in devices if d not in taken), key=lambda d: (load[d], devices.index(d)))
        return free[:n]

    out: list[tuple[Device, ...]] = []
    taken: set[Device] = set()
    for size in sizes:
        picked = least(taken if distinct else set(), size)
        taken |= set(picked)
        load.update(picked)
        out.append(tuple(sorted(picked, key=devices.index)))
    return tuple(out)


def place(plan: Plan, devices: Sequence[Device], default_share: float) -> dict[str, Placed]:
    """Every variant's devices and share for GPU= ``devices`` (module docstring)."""
    variants = {s.name: s for s in plan.servers}
    placed: dict[str, tuple[tuple[Device, ...], ...]] = {}
    refused: dict[str, str] = {}
    sets = co_resident(plan) + [(n,) for n in variants]  # a variant no phase names is placed alone
    for names in sets:
        load = Counter(g for n in names if n in placed for member in placed[n] for g in member)
        for name in names:
            if name in placed or name in refused:
                continue
            got = assign(variants[name], list(devices), load)
            if isinstance(got, str):
                refused[name] = got
            else:
                placed[name] = got
    shares = {n: share_of(n, sets, placed, variants, default_share) for n in placed}
    out = {n: Placed(n, refused=r) for n, r in refused.items()}
    for name, share in shares.items():
        out[name] = Placed(name, placed[name], share if isinstance(share, float) else None,
                           share if isinstance(share, str) else None)
    return out


def share_of(name: str, sets: list[tuple[str, ...]], placed: dict[str, tuple[tuple[Device, ...], ...]],
             variants: dict[str, ServerVariant], default_share: float) -> float | str:
    """The variant's memory share: its own or the default, capped by its busiest device; a reason if it cannot."""
    own = variants[name].settings.get("gpu_memory_utilization")
    share = float(own) if own is not None else default_share
    mine = {g for member in placed[name] for g in member}
    for names in (s for s in sets if name in s):
        load = Counter(g for n in names if n in placed for member in placed[n] for g in member)
        busiest = max(load[g] for g in mine)
        if busiest < 2:
            continue
        if own is None:
            share = min(share, math.floor(SHARE_LIMIT / busiest * 100) / 100)
            continue
        for g in mine:
            total = sum(float(variants[n].settings.get("gpu_memory_utilization") or default_share)
                        for n in names if n in placed for member in placed[n] if g in member)
            if total > SHARE_LIMIT + 1e-9:
                others = ", ".join(n for n in names if n != name and n in placed)
                return (f"its memory share {share:g} and those of {others}, up at the same time on GPU {g}, sum to "
                        f"{total:.3f} > {SHARE_LIMIT}: offer more devices or keep one server up")
    return share


def placed_plan(plan: Plan, placed: dict[str, Placed]) -> Plan:
    """The plan with every placed variant's devices and share in its settings (refused ones as they were)."""
    def with_devices(variant: ServerVariant) -> ServerVariant:
        where = placed.get(variant.name)
        if where is None or where.refused:
            return variant
        settings: dict[str, Any] = {**variant.settings, "gpus": where.gpus, "gpu_memory_utilization": where.share}
        layout = variant.layout and replace(variant.layout, gpus=where.member_gpus)
        return replace(variant, settings=settings, layout=layout)
    return replace(plan, servers=tuple(with_devices(v) for v in plan.servers))

