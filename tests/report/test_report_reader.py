"""Where a run's result and figures are found, and how headline figures are read or derived."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.contract.result import Effect, read_result
from harness.report.reader import _figure_names, headline_figures, result_file
from harness.rundir.record import RunRecord

EXAMPLE = read_result(Path(__file__).parents[1] / "examples/valid/serving-single.json")

RUN_DIR = "runs/x/1"
SUBJECTS = {f"{RUN_DIR}/{n}": "0" * 64 for n in ("run.json", "comparison.json", "result.json", "a.png", "b.png",
                                                   "arms/r1/c.png")}


def _run(outputs: dict | None = None) -> RunRecord:
    return RunRecord(semantic_id="INF-X", run_id="1", run_label="x", requested={}, effective={},
                     evidence_level="single", decision="inconclusive", outputs=outputs)


def test_the_result_document_is_outputs_result_then_comparison_then_result():
    named = {"result": "sweep.json", "summary": "summary.txt", "figures": []}
    assert result_file(_run(named), SUBJECTS, RUN_DIR) == "sweep.json"
    assert result_file(_run(), SUBJECTS, RUN_DIR) == "comparison.json"
    without = {k: v for k, v in SUBJECTS.items() if not k.endswith("comparison.json")}
    assert result_file(_run(), without, RUN_DIR) == "result.json"


def test_figures_are_outputs_figures_else_top_level_pngs():
    assert _figure_names(_run(), SUBJECTS, RUN_DIR) == [f"{RUN_DIR}/a.png", f"{RUN_DIR}/b.png"]
    named = {"result": None, "summary": "summary.txt", "figures": ["b.png"]}
    assert _figure_names(_run(named), SUBJECTS, RUN_DIR) == [f"{RUN_DIR}/b.png"]


def test_a_declared_headline_is_taken_as_is_and_malformed_entries_are_left_out_with_a_note():
    declared = [{"name": "capacity", "value": 12.5, "unit": "req/s", "ci_low": 11.0, "ci_high": 14.0, "arm": "c1"},
                {"name": "no value", "value": None, "unit": "ms"},
                {"name": "bad", "value": "12", "unit": "ms"},
                {"value": 3, "unit": "ms"}]
    items, notes = headline_figures(replace(EXAMPLE, details={"headline": declared}))
    assert items == declared[:2]
    assert notes == ["2 details.headline entries not of the form {name, value, unit, ci_low?, ci_high?, arm?}: "
                     "left out"]


def test_without_a_declared_headline_the_effect_and_p50s_are_derived():
    effect = Effect(metric="ttft_ms.p50", estimator="ratio", value=0.1, ci_low=0.05, ci_high=0.3, confidence=0.95,
                    no_effect=1.0, better="lower", method="bootstrap", n_pairs=3, arm_a="A", arm_b="B")
    result = replace(EXAMPLE, details={}, conclusion=replace(EXAMPLE.conclusion, effect=effect),
                     performance=replace(EXAMPLE.performance, ttft_ms={"p50": 80.0}, tpot_ms=None,
                                         e2e_ms={"p50": 400.0},
                                         throughput={"output_tokens_per_s": 50.0, "request_rate_rps": 2.0}))
    items, notes = headline_figures(result)
    assert notes == []
    assert items == [
        {"name": "effect on ttft_ms.p50", "value": 0.1, "unit": "ratio", "ci_low": 0.05, "ci_high": 0.3,
         "arm": "B vs A"},
        {"name": "TTFT p50", "value": 80.0, "unit": "ms"},
        {"name": "E2E p50", "value": 400.0, "unit": "ms"},
        {"name": "output throughput", "value": 50.0, "unit": "tok/s"},
        {"name": "request rate", "value": 2.0, "unit": "req/s"},
    ]


def test_a_result_this_version_cannot_read_is_a_one_line_note_not_a_traceback():
    from harness.report.reader import _verified_result

    doc = EXAMPLE.to_dict()
    del doc["conclusion"]["valid"]
    notes: list[str] = []
    assert _verified_result(doc, f"{RUN_DIR}/result.json", notes) is None
    assert notes == [f"{RUN_DIR}/result.json: /conclusion: 'valid' is a required property (and 1 more): "
                     "no headline figures"]
