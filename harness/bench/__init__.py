"""Benches as declarative specs run by one runner.

``spec`` (what a bench is), ``metrics`` (named metrics), ``runner`` (the one runner),
``arms`` and ``server_session`` (one arm run, one server start), ``analysis``
(claims, controls, the top-level result), ``stats`` (paired bootstrap and the
decision rule), ``sweep`` (load sweeps and their reading rules), ``benches/``
(one spec per project exit).
"""

from __future__ import annotations

from harness.bench.spec import BenchSpec
from harness.registry import discover, lookup

BENCH_PACKAGE = "harness.bench.benches"


def bench_specs() -> dict[str, BenchSpec]:
    """Every bench spec, by number."""
    return discover(BENCH_PACKAGE, "SPEC", BenchSpec)


def get_bench(name: str) -> BenchSpec:
    return lookup(BENCH_PACKAGE, "SPEC", BenchSpec, name, "bench")
