"""Benches as declarative specs run by one runner.

``spec`` (what a bench is), ``metrics`` (named metrics), ``runner`` (the one runner),
``arms`` and ``server_session`` (one arm run, one server start), ``analysis``
(claims, controls, the top-level result), ``stats`` (paired bootstrap and the
decision rule), ``sweep`` (load sweeps and their reading rules), ``benches/``
(one spec per project exit).
"""

from __future__ import annotations

import harness.experiments.benches  # noqa: F401  (first, so the function below keeps the name; see benches())
from harness.experiments.spec import BenchSpec
from harness.registry import discover, lookup

BENCH_PACKAGE = "harness.experiments.benches"


def benches() -> dict[str, BenchSpec]:
    """Every bench spec, by number.

    The subpackage of the same name is imported at the top of this module: Python binds a package's
    attribute to a subpackage when the subpackage is first imported, so importing it later (discovery,
    or any ``harness.experiments.benches.benchNN``) would otherwise replace this function.
    """
    return discover(BENCH_PACKAGE, "SPEC", BenchSpec)


def get_bench(name: str) -> BenchSpec:
    return lookup(BENCH_PACKAGE, "SPEC", BenchSpec, name, "bench")
