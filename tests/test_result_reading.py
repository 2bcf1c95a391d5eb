"""Results and run records read back through the typed groups that write them, after one schema check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.contract import Result, read_result
from harness.contract.result import Conclusion, Effect, Failure
from harness.errors import InvalidInput
from harness.rundir.record import RUN_FILE, RunRecord, read_run_record

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = [*REPO.glob("benchmarks/results/runs/*/*/*.json"), *REPO.glob("tests/examples/valid/*.json")]
RESULTS = sorted(p for p in CANDIDATES if json.loads(p.read_text()).get("schema") == "infkit/result/v1")


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_a_result_reads_back_into_the_groups_that_write_it(path):
    result = read_result(path)
    assert result.to_dict() == json.loads(path.read_text())  # nothing lost, nothing added
    assert isinstance(result.conclusion, Conclusion)
    assert result.conclusion.effect is None or isinstance(result.conclusion.effect, Effect)
    assert result.conclusion.failure is None or isinstance(result.conclusion.failure, Failure)


def test_a_committed_run_record_reads_back_whole():
    for run in REPO.glob(f"benchmarks/results/runs/*/*/{RUN_FILE}"):
        record = read_run_record(run.parent)
        assert record.to_dict() == json.loads(run.read_text())
        assert record.output("result") and record.model_version == (record.model or {}).get("version")


def test_detail_walks_the_details_and_is_none_where_absent():
    result = read_result(next(p for p in RESULTS if "comparison" in p.name))
    assert result.detail("no such entry", "below") is None
    key = next(iter(result.details))
    assert result.detail(key) == result.details[key]


def _doc(tmp_path: Path, edit) -> Path:
    doc = json.loads(RESULTS[0].read_text())
    edit(doc)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["conclusion"].pop("valid"), "/conclusion: 'valid' is a required property"),
    (lambda d: d.pop("performance"), "/: 'performance' is a required property"),
    (lambda d: d["identity"].update(workload_id="abc"), "/identity/workload_id"),
    (lambda d: d.update(schema="infkit/result/v0"), "/schema: not an infkit result ('infkit/result/v0'"),
])
def test_a_malformed_or_older_result_is_one_line_naming_the_file_and_field(tmp_path, edit, field):
    path = _doc(tmp_path, edit)
    with pytest.raises(InvalidInput) as err:
        read_result(path)
    assert str(err.value).startswith(f"{path}: ") and field in str(err.value) and "\n" not in str(err.value)


def test_a_run_record_missing_a_field_is_one_line(tmp_path):
    doc = json.loads(next(REPO.glob(f"benchmarks/results/runs/*/*/{RUN_FILE}")).read_text())
    del doc["workload_ids"]
    (tmp_path / RUN_FILE).write_text(json.dumps(doc))
    with pytest.raises(InvalidInput, match=r"run\.json: /: 'workload_ids' is a required property"):
        read_run_record(tmp_path)
    with pytest.raises(InvalidInput, match="not an infkit run record"):
        RunRecord.from_dict([], "somewhere")


def test_a_result_that_is_no_json_object_is_one_line():
    with pytest.raises(InvalidInput, match="^x.json: /schema: not an infkit result"):
        Result.from_dict(["not", "a", "result"], "x.json")


def test_publishing_a_run_whose_verified_run_record_is_missing_is_one_line(tmp_path, monkeypatch):
    from harness.manifest import excerpt
    from harness.manifest.audit import ManifestReport

    manifest = tmp_path / "m.intoto.json"
    manifest.write_text("{}")
    report = ManifestReport(manifest=str(manifest), findings=(), signer_keyid="k",
                            predicate={"run_dir": "runs/x/1", "semantic_id": "INF-X"}, documents={})
    monkeypatch.setattr(excerpt, "audit_paths", lambda paths, config: [report])
    with pytest.raises(InvalidInput, match=r"^runs/x/1/run\.json: /schema: not an infkit run record \(None"):
        excerpt.publish(manifest, tmp_path / "out", tmp_path)


def test_excluded_work_reads_back_typed_with_its_effect_on_every_request():
    from harness.contract import ExcludedWork

    result = read_result(REPO / "tests/examples/valid/comparison-adopt-stalled-request-excluded.json")
    work = result.conclusion.excluded_work
    assert isinstance(work, ExcludedWork) and isinstance(work.effect_all, Effect)
    assert (work.count, work.agree, work.decision_all) == (1, True, "adopt")


def test_a_br_export_leaves_out_a_serving_result_it_cannot_read_with_one_line(tmp_path):
    from harness.manifest.audit import ManifestReport
    from harness.report.br_export import _run_documents
    from harness.report.inputs import AuditedInput

    doc = json.loads((REPO / "tests/examples/valid/serving-single.json").read_text())
    del doc["correctness"]["termination_counts"]
    manifest = tmp_path / "m.intoto.json"
    manifest.write_text("{}")
    report = ManifestReport(manifest=str(manifest), findings=(), signer_keyid="k",
                            predicate={"run_dir": "runs/x/1", "run_id": "1"},
                            documents={"runs/x/1/arms/a/r1/result.json": doc})
    found, left_out = _run_documents(AuditedInput("m", manifest, report))
    assert found == [] and left_out == ["runs/x/1/arms/a/r1/result.json: /correctness: 'termination_counts' is a "
                                        "required property: not exported"]
