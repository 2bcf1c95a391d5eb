"""A cited run is read through the typed records that wrote it: a malformed or older cited file is one line naming
the file and the field, before the citing bench starts anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.bench import startcontrol
from harness.bench.lib import citations
from harness.bench.startcontrol import DETAILS_KEY, SEMANTIC_ID, estimates_of, host_key, run_started
from harness.contract.result import Result
from harness.errors import InvalidInput
from harness.manifest.audit import ManifestReport
from harness.rundir.record import RunRecord

REPO = Path(__file__).resolve().parents[2]
AA_RUN = next(REPO.glob("benchmarks/results/runs/00/*/run.json")).parent


@pytest.fixture
def cited(tmp_path, monkeypatch):
    """The committed bench-00 run's files under a private root, its manifest taken as audited VALID (the audit has
    its own tests; here the reading after it is what is checked)."""
    run_dir = f"runs/00/{AA_RUN.name}"
    shutil.copytree(AA_RUN, tmp_path / run_dir)
    manifest = tmp_path / "aa.intoto.json"
    manifest.write_text("{}")
    report = ManifestReport(manifest=str(manifest), findings=(), predicate={"run_dir": run_dir,
                                                                            "semantic_id": SEMANTIC_ID})
    monkeypatch.setattr(citations, "audit_paths", lambda paths, config: [report])
    return tmp_path, manifest, tmp_path / run_dir


def _edit(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def test_a_cited_run_is_read_as_a_run_record_and_a_result(cited):
    root, manifest, _ = cited
    citation = citations.cite(manifest, root, semantic_id=SEMANTIC_ID)
    assert isinstance(citation.run, RunRecord) and isinstance(citation.result, Result)
    assert citation.to_dict(root)["run_id"] == AA_RUN.name
    assert estimates_of(citation.detail(DETAILS_KEY, "rows")), "the start variance reads from the typed result"


def test_a_cited_result_missing_a_field_is_one_line_naming_it(cited):
    root, manifest, run_dir = cited
    result = run_dir / "comparison.json"
    _edit(result, lambda d: d["conclusion"].pop("valid"))
    with pytest.raises(InvalidInput) as err:
        citations.cite(manifest, root, semantic_id=SEMANTIC_ID)
    assert str(err.value).startswith(f"{result}: /conclusion: 'valid' is a required property")
    assert "\n" not in str(err.value)


def test_a_cited_run_record_of_an_older_schema_is_one_line_naming_it(cited):
    root, manifest, run_dir = cited
    _edit(run_dir / "run.json", lambda d: d.update(schema="infkit/run/v0"))
    with pytest.raises(InvalidInput, match=r"run\.json: /schema: not an infkit run record \('infkit/run/v0'"):
        citations.cite(manifest, root, semantic_id=SEMANTIC_ID)


def test_a_cited_aa_run_without_rows_names_what_it_lacks(cited):
    root, manifest, run_dir = cited
    _edit(run_dir / "comparison.json", lambda d: d["details"].pop("start_control"))
    citation = citations.cite(manifest, root, semantic_id=SEMANTIC_ID)
    here = host_key(json.loads((run_dir / "fingerprint.json").read_text()), citation.run.effective, citation.run.model)
    with pytest.raises(InvalidInput, match="holds no start-to-start variance"):
        startcontrol._estimates(citation, here, run_started(citation.run.run_id), root)
