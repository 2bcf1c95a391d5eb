"""Typed results and run records for tests: a committed reference result with only what a test is about replaced,
so the rest is a whole, schema-valid result as readers get it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.contract.result import Result, read_result
from harness.rundir.record import RunRecord

REPO = Path(__file__).resolve().parents[1]
BENCH66_SWEEP = next(REPO.glob("benchmarks/results/runs/66/*/sweep.json"))


def result_with(*, details: dict[str, Any] | None = None, shape: tuple[float, float] | None = None,
                base: Path = BENCH66_SWEEP) -> Result:
    """``base``'s result with these details and, given a shape, these mean prompt and output tokens."""
    result = read_result(base)
    workload = result.workload
    if shape is not None:
        workload = replace(workload, input_tokens={**workload.input_tokens, "mean": shape[0]},
                           output_tokens={**workload.output_tokens, "mean": shape[1]})
    return replace(result, details=details, workload=workload)


def run_record(**fields: Any) -> RunRecord:
    """A run record with these fields, the others placeholders."""
    defaults: dict[str, Any] = dict(semantic_id="INF-FLOAT-BASELINE", run_id="r", run_label="x", requested={},
                                    effective={}, evidence_level="single", decision="inconclusive")
    return RunRecord(**{**defaults, **fields})
