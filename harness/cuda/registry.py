"""Experiments register by name; adding one is adding a module of ``harness.cuda`` with an ``EXPERIMENT``.

Discovery is ``harness.registry.discover``. Experiment modules import torch lazily,
so listing them (``infkit cuda --help``) works without torch installed. Config
fields are declared with ``harness.knobs.knob``: their help and constraints are
the command line and the Make variables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.knobs import KnobConfig, knob
from harness.registry import discover, lookup

PACKAGE = "harness.cuda"


@dataclass(frozen=True)
class CommonConfig(KnobConfig):
    """Fields every experiment has; checked when an instance is made (``KnobConfig``)."""

    seed: int = knob(0, "seed of the local RNG that makes the inputs", min=0, group="protocol")
    warmup: int = knob(3, "untimed calls before each timed series", min=0, group="protocol")
    iters: int = knob(20, "timed calls per series", min=1, group="protocol")
    threads: int = knob(0, "torch intra-op CPU threads (0: torch's default)", min=0, group="protocol")

    def sized_for(self, device: str) -> CommonConfig:
        """The config as it runs on ``device`` (an experiment whose unset sizes depend on the device fills them)."""
        return self


@dataclass(frozen=True)
class Experiment:
    """A CUDA experiment: its name, semantic id, one-line help, config dataclass (a ``CommonConfig``) and run."""

    name: str
    semantic_id: str
    help: str
    config: type
    run: Callable[..., Any]


def experiments() -> dict[str, Experiment]:
    """Every experiment module of ``harness.cuda``, by name."""
    return discover(PACKAGE, "EXPERIMENT", Experiment)


def get_experiment(name: str) -> Experiment:
    return lookup(PACKAGE, "EXPERIMENT", Experiment, name, "CUDA experiment")
