"""A plan whose load is decided while running: bench-66's capacity probe first, then the bench's own plan at it.

On a GPU with no usable bench-66 run cited (``gpuload``), a bench cannot size its load before it runs. ``probed``
keeps the plan built at a stand-in load for what does not depend on it (servers, arms, claims, phases, the warm-up's
request shape) and decides the rest on the first server: its first phase opens with a closed-loop capacity probe
(``LoadSweep.probe``, bench-66's), and every phase then runs the same phase of ``make(capacity)``, the bench's plan at
the probed load, its workloads made under their own names. The reading is that plan's, the probe's runs left out,
with the load's source in its details and lines. A probe that reads no capacity runs no arm, and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from harness.bench.lib.gpuload import Capacity, probed_capacity
from harness.bench.lib.sweep import PILOT_WAVES, PROBE, PROBE_LONG, LoadSweep
from harness.bench.records import Reading
from harness.bench.spec import Arm, History, Plan, Step
from harness.workload import Arrival, Common

PROBE_LABELS = (PROBE, PROBE_LONG)
NOTE = "load"  # history.notes key: the load's source
GPU_PROBE_CONCURRENCY = 64  # in flight in the probe's closed loop: past where one GPU engine's batch stops growing
GPU_PROBE_S = 20.0  # its steady window: a GPU serves hundreds of requests in it


@dataclass
class Deferred:
    """The bench's plan at the probed capacity, made once the probe has run."""

    make: Callable[[Capacity], Plan]
    sweep: LoadSweep
    made: dict[int, Plan | None] = field(default_factory=dict)  # by run (its history)

    def plan(self, history: History) -> Plan | None:
        if id(history) not in self.made:
            capacity = probed_capacity({**(history.notes.get("capacity_probe") or {}), "server": self.sweep.server})
            self.made[id(history)] = self.make(capacity) if capacity else None
            history.notes[NOTE] = capacity.to_dict() if capacity else {
                "source": "the capacity probe read no capacity (see its arm runs): no arm runs at a CPU-sized load"}
        return self.made[id(history)]

    def steps(self, index: int) -> Callable[[History], Iterator[Step]]:
        def run(history: History) -> Iterator[Step]:
            if index == 0:
                yield from self.sweep.probe(history)
            inner = self.plan(history)
            if inner is None:
                return
            phase = inner.phases[index]
            for repeat, arm in (phase.steps(history) if callable(phase.steps) else phase.steps):
                yield repeat, with_workload(arm, inner)
        return run

    def read(self, history: History) -> Reading:
        inner = self.plan(history)
        load = history.notes.get(NOTE) or {}
        if inner is None or inner.read is None:  # no capacity: the probe's runs are all there is to read
            return Reading(evidence_level="precheck", decision="blocked", summary=str(load.get("source")),
                           details={"load": load}, lines=(str(load.get("source")),))
        kept = replace(history, runs=[r for r in history.runs if r.label not in PROBE_LABELS])
        return inner.read(kept).with_details(load={**load, "plan_notes": list(inner.notes)}).with_lines(
            str(load.get("source")), *inner.notes[:3])


def stated(plan: Plan, capacity: Capacity) -> Plan:
    """``plan`` whose reading says where its load came from (``details.load`` and a summary line), as a probed one's
    does."""
    read = plan.read
    if read is None:
        return plan
    return replace(plan, read=lambda history: read(history).with_details(load=capacity.to_dict()).with_lines(
        capacity.source))


def with_workload(arm: Arm, plan: Plan) -> Arm:
    """The arm carrying its workload's plan, so it is made under its name when first run."""
    if not isinstance(arm.workload, str):
        return arm
    return replace(arm, workload=next(w for w in plan.workloads if w.name == arm.workload))


def probed(skeleton: Plan, shape: Common, make: Callable[[Capacity], Plan], note: str) -> Plan:
    """``skeleton`` with its load probed on its first phase's first server (module docstring); ``note`` says why."""
    first = skeleton.phases[0]
    sweep = LoadSweep(shape, first.servers[0], repeats=1, probe_concurrency=GPU_PROBE_CONCURRENCY,
                      probe_s=GPU_PROBE_S, label="capacity probe")
    deferred = Deferred(make, sweep)
    if skeleton.read is None:
        raise ValueError("a probed plan reads through its own plan's rule: give the skeleton one")
    phases = tuple(replace(p, steps=deferred.steps(i), planned_steps=(2 if i == 0 else 0) + (
        p.planned_steps or 0 if callable(p.steps) else len(p.steps))) for i, p in enumerate(skeleton.phases))
    probe = sweep.level(PROBE, Arrival("closed", concurrency=GPU_PROBE_CONCURRENCY),
                        PILOT_WAVES * GPU_PROBE_CONCURRENCY)
    arms = (probe, *(with_workload(a, skeleton) for a in skeleton.arms))
    return replace(skeleton, workloads=(), arms=arms, schedule=replace(skeleton.schedule, phases=phases),
                   read=deferred.read, warmup=shape, notes=(*skeleton.notes, note))
