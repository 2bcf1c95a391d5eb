"""CPU mechanism kit: simulated serving mechanisms, one entry module each.

Parts:

- ``engine/``: the step-machine serving engine (scheduler, waiting queues, KV block
  pools, radix tree), its step-cost model, simulated workloads and run modes;
- ``specdec/``: speculative-decoding formulas, Monte-Carlo and proposal schedules;
- ``calibrate/``: the profiling plan and the fit of the step-cost model (the live
  part, which starts servers, is ``harness.mech.calibrate.live``);
- ``lifecycle``, ``budget``, ``batching``, ``kvcache``: mechanisms on the engine
  and on the model table (``harness.models.shapes``);
- ``output``: what every mechanism run writes.

A mechanism's module (or subpackage) exports ``MECHANISM = Mechanism(...)``: a
frozen config dataclass whose ``knob`` fields are ``infkit mech NAME``'s flags,
and ``run(config) -> MechOutput``. ``mechanisms()`` discovers them; adding one is
adding a module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.knobs import KnobConfig
from harness.registry import discover, lookup

MechConfig = KnobConfig  # the base of every mechanism config: checked when an instance is made


@dataclass(frozen=True)
class Mechanism:
    """A CPU mechanism: its name, config dataclass (a ``KnobConfig``), ``run(config) -> MechOutput`` and one-line
    help."""

    name: str
    config: type
    run: Callable[[Any], Any]
    help: str


def mechanisms() -> dict[str, Mechanism]:
    """Every mechanism of ``harness.mech``, by name."""
    return discover("harness.mech", "MECHANISM", Mechanism)


def get_mechanism(name: str) -> Mechanism:
    return lookup("harness.mech", "MECHANISM", Mechanism, name, "mechanism")
