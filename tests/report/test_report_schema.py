"""schemas/report.schema.json: registered by its marker, and an INVALID row can carry no number."""

from __future__ import annotations

import copy
import json

from harness.contract.schemas import known_markers, validate_document
from harness.report.build import ReportConfig, build_report


def _doc(root, mech_runs, tmp_path) -> dict:
    build_report([str(mech_runs["budget"].run_dir), "missing"], ReportConfig(out_dir=tmp_path / "o", root=root.path))
    return json.loads((tmp_path / "o" / "report.json").read_text())


def test_the_report_schema_is_registered():
    assert "infkit/report/v1" in known_markers()


def test_an_invalid_row_with_a_number_breaks_the_schema(root, mech_runs, tmp_path):
    doc = _doc(root, mech_runs, tmp_path)
    assert validate_document(doc) == []
    leaked = copy.deepcopy(doc)
    bad = next(r for s in leaked["benches"] for r in s["runs"] if r["verdict"] == "INVALID")
    bad["headline"] = [{"name": "TTFT p50", "value": 1.0, "unit": "ms"}]
    problems = validate_document(leaked)
    assert problems and "an INVALID input states why and contributes no number" in str(problems[0])


def test_a_valid_row_without_run_id_breaks_the_schema(root, mech_runs, tmp_path):
    doc = _doc(root, mech_runs, tmp_path)
    row = next(r for s in doc["benches"] for r in s["runs"] if r["verdict"] == "VALID")
    row["run_id"] = None
    assert any("a VALID input passed every check" in str(p) for p in validate_document(doc))
