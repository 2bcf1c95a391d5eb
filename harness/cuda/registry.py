"""Experiments register here by name; adding one is adding a module with an ``EXPERIMENT``.

A module of ``harness.cuda`` that defines a module-level ``EXPERIMENT`` is
discovered by :func:`experiments`. Experiment modules import torch lazily, so
listing them (``infkit cuda --help``) works without torch installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.errors import InvalidInput


@dataclass(frozen=True)
class CommonConfig:
    """Fields every experiment has; each field's ``help`` metadata becomes its CLI help."""

    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the local RNG that makes the inputs"})
    warmup: int = dataclasses.field(default=3, metadata={"help": "untimed calls before each timed series"})
    iters: int = dataclasses.field(default=20, metadata={"help": "timed calls per series"})
    threads: int = dataclasses.field(default=0, metadata={"help": "torch intra-op CPU threads (0: torch's default)"})

    def check(self) -> None:
        """Raise ``InvalidInput`` for values no experiment can run with."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise InvalidInput(f"--{f.name.replace('_', '-')} must be >= 0 (got {value})")
        if self.iters < 1:
            raise InvalidInput(f"--iters must be >= 1 (got {self.iters})")


@dataclass(frozen=True)
class Experiment:
    name: str
    semantic_id: str
    summary: str
    config_cls: type
    run: Callable[..., Any]


def experiments() -> dict[str, Experiment]:
    """Every experiment module of ``harness.cuda``, by name."""
    import harness.cuda as package

    found: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        exp = getattr(module, "EXPERIMENT", None)
        if isinstance(exp, Experiment):
            found[exp.name] = exp
    return found


def get_experiment(name: str) -> Experiment:
    known = experiments()
    if name not in known:
        raise InvalidInput(f"unknown CUDA experiment {name!r}; known: {', '.join(sorted(known))}")
    return known[name]


def config_fields(config_cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """(field, resolved type) for each field of a config dataclass, in declaration order."""
    hints = typing.get_type_hints(config_cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(config_cls)]


def parse_field(value: str, type_: Any, name: str) -> Any:
    """Parse one CLI value into a config field's type (tuples are comma-separated)."""
    try:
        if typing.get_origin(type_) is tuple:
            (item_type, *_rest) = typing.get_args(type_)
            return tuple(item_type(v) for v in value.split(",") if v.strip())
        if type_ is bool:
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        if typing.get_origin(type_) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            inner = [t for t in typing.get_args(type_) if t is not type(None)][0]
            return None if value.lower() in ("", "none") else inner(value)
        return type_(value)
    except ValueError:
        expected = (f"a comma-separated list of {typing.get_args(type_)[0].__name__}" if typing.get_origin(type_) is tuple
                    else getattr(type_, "__name__", str(type_)))
        raise InvalidInput(f"--{name.replace('_', '-')}: cannot read {value!r} as {expected}") from None
