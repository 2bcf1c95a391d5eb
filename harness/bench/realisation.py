"""A fresh arrival realisation per repeat, the same for every arm of that repeat.

A timed workload drawn once and replayed in every repeat makes the repeats sample server noise only: every
repeat meets the same bursts at the same moments. For a workload whose arrivals are random (``poisson``,
``gamma``), repeat r replays its own draw: the arrival seed is derived from the workload's own arrival seed
(the bench seed + 2 unless overridden) and r, so the arms of one repeat — both twins of a pair, a layout and
its baseline in the same round — get identical arrival times (paired), and different repeats get different
ones. Prompts and lengths keep their own seeds, so a pair of twins stays identical in lengths, and in arrivals
per repeat. Repeat 1 keeps the workload's own seed (its file is the one ``infkit workload make`` with the same
flags writes); repeat r > 1 is ``<name>-r<r>`` with the derived ``--arrival-seed``, which its header records.
Every redraw is scheduled at the rate repeat 1's list runs at, (n - 1) / span (``arrival.rescheduled``): for a
list a bench scheduled at its rate (``arrival.scheduled``) that is the rate asked for, so repeats differ in where
the bursts fall and not in the load they offer (a 100-request list at 1 req/s would otherwise run its redraws
at 0.9-1.3x). A kind that schedules its own arrivals (session starts) or counts a file's rows keeps its draw.

Closed loops have no arrival times, a constant rate draws nothing and a trace replay keeps its recorded
arrivals: those stay one file. A plan opts out with ``Plan(fresh_arrivals=False)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from harness.bench.records import Workload
from harness.bench.spec import WorkloadPlan
from harness.workload.arrival import rescheduled
from harness.workload.generators import arrival_draws

RANDOM_ARRIVALS = ("poisson", "gamma")


def fresh(plan: WorkloadPlan) -> bool:
    """Whether ``plan``'s arrival times are a random draw that a repeat should redraw."""
    return plan.measured and plan.common.arrival.process in RANDOM_ARRIVALS


def arrival_seed(base: int, repeat: int) -> int:
    """Repeat ``repeat``'s arrival seed from the workload's own (``base``): repeat 1 keeps it, a later repeat gets a
    63-bit hash of both (within the +-2**64 a workload seed may take)."""
    if repeat <= 1:
        return base
    return int.from_bytes(hashlib.sha256(f"arrival:{base}:repeat:{repeat}".encode()).digest()[:8], "big") >> 1


def realised(plan: WorkloadPlan, repeat: int, enabled: bool = True) -> WorkloadPlan:
    """The workload ``repeat`` replays: ``plan`` itself, or its own arrival draw (module docstring)."""
    if repeat <= 1 or not enabled or not fresh(plan):
        return plan
    base = plan.common.seed_for("arrival")
    seed, arrival = arrival_seed(base, repeat), plan.common.arrival
    draws = arrival_draws(plan.kind, plan.common, dict(plan.options))
    if draws is not None:
        arrival = rescheduled(arrival, draws, base, seed)
    common = dataclasses.replace(plan.common, arrival=arrival, seeds={**plan.common.seeds, "arrival": seed})
    return dataclasses.replace(plan, name=f"{plan.name}-r{repeat}", common=common)


def realisation_entry(plan: WorkloadPlan, repeat: int, arm: str, made: Workload, file: str,
                      enabled: bool = True) -> dict[str, Any]:
    """What the protocol record says of one arm run's workload: which realisation it replayed."""
    used = realised(plan, repeat, enabled)
    return {"arm": arm, "repeat": repeat, "workload": plan.name, "realisation": used.name,
            "arrival_seed": used.common.seed_for("arrival"), "drawn_per_repeat": enabled and fresh(plan),
            "workload_id": made.workload_id, "path": file}
