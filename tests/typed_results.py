"""Typed results and run records for tests: a committed reference result with only what a test is about replaced,
so the rest is a whole, schema-valid result as readers get it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.contract.result import Conclusion, Performance, Result, read_result
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


SERVING = REPO / "tests/examples/valid/serving-single.json"


def arm_result(partial: dict[str, Any]) -> Result:
    """An arm run's result holding what ``partial`` gives and nothing else a test's code could read: its performance
    and conclusion fields (the rest null, the conclusion valid), its details, its other groups over the example
    serving result's. Typed as given, without the schema check: a test states only what the code under test reads."""
    base = read_result(SERVING)
    conclusion = {"evidence_level": "single", "decision": "inconclusive", "next_step": "", "failure": None,
                  **(partial.get("conclusion") or {})}
    if isinstance(conclusion["failure"], dict):
        conclusion["failure"] = {"stage": "measure", "message": "", "recovered": False, **conclusion["failure"]}
    groups = {name: replace(getattr(base, name), **partial[name]) for name in ("identity", "workload", "environment",
                                                                                "correctness") if name in partial}
    return replace(base, **groups, kind=partial.get("kind", base.kind), details=partial.get("details"),
                   performance=Performance(**partial.get("performance", {})),
                   conclusion=Conclusion.from_dict(conclusion))
