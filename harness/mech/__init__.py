"""CPU mechanism kit: one module per mechanism, registered here by name.

Each mechanism has a frozen config dataclass (the CLI is derived from its
fields) and a ``run(config) -> MechOutput`` function; ``write_mech_run`` turns
the output into result.json, run.json, summary.txt and plots.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from harness.errors import InvalidInput


@dataclass(frozen=True)
class Mechanism:
    name: str
    module: str
    config: str
    runner: str
    help: str

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config)

    def run(self, config: Any) -> Any:
        return importlib.import_module(self.runner).run(config)


MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("lifecycle", "harness.mech.lifecycle", "LifecycleConfig", "harness.mech.lifecycle",
                  "request state machine, event trace and TTFT/TPOT/E2E derived from it"),
        Mechanism("budget", "harness.mech.budget", "BudgetConfig", "harness.mech.budget",
                  "KV bytes per token, block capacity, batch x context grid and OOM boundary"),
        Mechanism("batching", "harness.mech.batching", "BatchingConfig", "harness.mech.batching",
                  "static vs continuous vs disaggregated serving, simulated"),
        Mechanism("kvcache", "harness.mech.kvcache", "KvCacheConfig", "harness.mech.kvcache",
                  "hashed-block and radix prefix caches on the paired prefix workloads"),
        Mechanism("specdec", "harness.mech.specdec_run", "SpecDecConfig", "harness.mech.specdec_run",
                  "speculative-decoding formulas, Monte-Carlo, draft topologies and proposal schedules"),
        Mechanism("calibrate", "harness.mech.calibrate", "CalibrateConfig", "harness.mech.calibrate_run",
                  "fit the step-cost model and report held-out TTFT/TPOT prediction error"),
    )
}


def get_mechanism(name: str) -> Mechanism:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise InvalidInput(f"unknown mechanism {name!r}", hint="one of " + ", ".join(MECHANISMS)) from None
