"""docs/measurement.md's pandas recipe, run as written on a measured run, its workload file and a report of it."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer
from report_runs import Root, make_root, sign

from harness.report.build import ReportConfig, build_report
from harness.rundir.record import RunRecord, native_image, write_run_record
from harness.serving.measure import MeasureConfig, measure
from harness.workload import Arrival, Common, make_workload, write_workload

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "measurement.md"


def _recipe() -> str:
    match = re.search(r"<!-- recipe: pandas -->\n```python\n(.*?)\n```", DOC.read_text(), re.S)
    assert match, "docs/measurement.md has no pandas recipe"
    return match.group(1)


def _signed_measured_run(root: Root, tokenizer_dir: Path) -> Path:
    """root/shared.jsonl, and root/runs/shared measured against the stand-in server, made a signed run."""
    workload = write_workload(root.path / "shared.jsonl", make_workload(
        "shared-prefix", Common(arrival=Arrival("closed", concurrency=2), output_tokens=6),
        {"groups": 2, "prompts_per_group": 4, "prefix_tokens": 32, "suffix_tokens": 8}, tokenizer_dir))
    run_dir = root.path / "runs" / "shared"
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.004)) as srv:
        measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=workload, out_dir=run_dir,
                              semantic_id="INF-PREFIX-CACHE", run_label="shared-prefix/pandas"))
    result = json.loads((run_dir / "result.json").read_text())
    identity, conclusion = result["identity"], result["conclusion"]
    write_run_record(run_dir, RunRecord(
        semantic_id=identity["semantic_id"], run_id=identity["run_id"], run_label=identity["run_label"],
        requested={}, effective={}, evidence_level=conclusion["evidence_level"], decision=conclusion["decision"],
        command=["infkit", "run"], images=[native_image("INF-CPU")], workload_ids=[identity["workload_id"]],
        ended_utc=identity["created_utc"]))
    shutil.copy(REPO / "tests" / "examples" / "valid" / "fingerprint-no-gpu.json", run_dir / "fingerprint.json")
    return sign(root, run_dir).manifest


def test_the_pandas_recipe_reads_requests_result_workload_and_report(tmp_path, tokenizer_dir, monkeypatch):
    (tmp_path / "root").mkdir()
    root = make_root(tmp_path / "root")
    manifest = _signed_measured_run(root, tokenizer_dir)
    build_report([str(manifest)], ReportConfig(out_dir=root.path / "runs" / "report", root=root.path, charts=False))
    monkeypatch.chdir(root.path)
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(compile(_recipe(), str(DOC), "exec"), scope)  # noqa: S102 (the page's own lines)
    assert "ttft_ms" in printed.getvalue()

    requests, latency, workload, header = scope["requests"], scope["latency"], scope["workload"], scope["header"]
    assert set(requests["status"]) == {"length"}
    assert sorted(requests["index"]) == list(range(8))  # one row per request, in the order they ended
    # the per-request rows give the result's distribution (linear interpolation, as performance.percentile_method)
    assert requests["ttft_ms"].quantile(0.5) == pytest.approx(latency.loc["ttft_ms", "p50"], abs=1e-3)
    assert requests["ttft_ms"].max() == pytest.approx(latency.loc["ttft_ms", "max"], abs=1e-3)
    assert {"ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"} <= set(latency.index) and latency.loc["e2e_ms", "n"] == 8
    assert scope["flat"]["performance.throughput.output_tokens_per_s"].iloc[0] > 0
    # the header line is not a request: the requests are the rest, with their own columns
    assert header["schema"] == "infkit/workload/v1" and header["request_count"] == len(workload) == 8
    assert "schema" not in workload.columns and workload["input_tokens"].dtype.kind == "i"
    assert workload["index"].tolist() == list(range(8))
    runs, headline = scope["runs"], scope["headline"]
    assert runs[["semantic_id", "run.verdict"]].values.tolist() == [["INF-PREFIX-CACHE", "VALID"]]
    assert not headline.empty and set(headline["runs.run_id"]) == set(runs["run.run_id"])
