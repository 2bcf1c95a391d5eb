"""BR0.2.1 export: the vendored schema and its pin, each bench's result shape, and the command on signed runs.

``br_runs/bench-NN.result.json`` are serving results recorded from every bench run through the one
runner against the stand-in engine (tests/bench/fake_engine.py; how: br_runs/README.md), so each
bench's result shape is exported and validated without starting a real server.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from report_runs import Root, make_root, sign

from harness.cli import main
from harness.contract.result import Result, read_result
from harness.contract.schemas import validate_document
from harness.report.br import BR_VERSION, VENDOR_DIR, Evidence, br_document, br_problems
from harness.rundir.record import RunRecord, native_image, write_run_record

HERE = Path(__file__).parent
RUNS = HERE / "br_runs"
EXAMPLES = HERE.parents[0] / "examples" / "valid"
BENCHES = sorted(p.name.split(".")[0] for p in RUNS.glob("bench-*.result.json"))
EVIDENCE = Evidence("a" * 64, "b" * 64, "c" * 64)


def _result(name: str) -> dict:
    return json.loads((RUNS / f"{name}.result.json").read_text())


def _aggregate(doc: dict) -> dict:
    return doc["results"]["request_performance"]["aggregate"]


def test_the_vendored_files_are_the_pinned_ones():
    pin = json.loads((VENDOR_DIR / "pin.json").read_text())
    assert pin["repository"] == "https://github.com/llm-d/llm-d-benchmark" and len(pin["revision"]) == 40
    assert set(pin["files"]) == {p.name for p in VENDOR_DIR.iterdir()} - {"pin.json"}
    for name, entry in pin["files"].items():
        assert hashlib.sha256((VENDOR_DIR / name).read_bytes()).hexdigest() == entry["sha256"], name
        assert entry["path"].endswith(name) and len(entry["last_changed"]) == 40


def test_the_schema_is_br_0_2_1():
    schema = json.loads((VENDOR_DIR / "br_v0_2_1_json_schema.json").read_text())
    assert schema["title"] == "Benchmark Report v0.2.1" and schema["properties"]["version"]["default"] == BR_VERSION


def test_upstreams_example_validates_and_round_trips():
    yaml = pytest.importorskip("yaml")
    example = yaml.safe_load((VENDOR_DIR / "br_v0_2_1_example.yaml").read_text())
    assert br_problems(example) == []
    assert json.loads(json.dumps(example)) == example


def test_a_document_off_the_schema_or_a_unit_rule_is_named():
    doc = br_document(read_result(EXAMPLES / "serving-single.json"), uid="u", eid=None, evidence=None)
    assert br_problems(doc) == []
    off = copy.deepcopy(doc)
    off["run"]["signer"] = "k"  # BR's run block is closed
    assert any("'signer' was unexpected" in p for p in br_problems(off))
    wrong_unit = copy.deepcopy(doc)
    _aggregate(wrong_unit)["latency"]["time_per_output_token"]["units"] = "ms"  # the JSON Schema allows any unit
    assert br_problems(wrong_unit) == [
        "results.request_performance.aggregate.latency.time_per_output_token: units 'ms', allowed ms/token, s/token"]


def test_the_round_trip_fixture_is_what_the_export_writes_and_reads_back_as_the_result():
    result = json.loads((EXAMPLES / "serving-single.json").read_text())
    expected = json.loads((RUNS / "serving-single.br0.2.1.json").read_text())
    run_id = result["identity"]["run_id"]
    doc = br_document(Result.from_dict(result, "serving-single.json"), uid=f"{run_id}/result.json", eid=run_id,
                      evidence=EVIDENCE)
    assert doc == expected and br_problems(expected) == []
    aggregate, perf = _aggregate(expected), result["performance"]
    for br, ours in (("time_to_first_token", "ttft_ms"), ("request_latency", "e2e_ms"),
                     ("time_per_output_token", "tpot_ms")):
        got = aggregate["latency"][br]
        assert {k: got[k] for k in ("mean", "min", "p50", "p90", "p95", "p99", "max")} == {
            k: perf[ours][k] for k in ("mean", "min", "p50", "p90", "p95", "p99", "max")}
        assert got["stddev"] == perf[ours]["std"]
    throughput = aggregate["throughput"]
    assert throughput["request_rate"] == {"units": "queries/s", "mean": perf["throughput"]["request_rate_rps"]}
    assert throughput["input_token_rate"]["mean"] + throughput["output_token_rate"]["mean"] == pytest.approx(
        perf["throughput"]["total_tokens_per_s"])
    assert aggregate["requests"] == {"total": 8, "failures": 0,
                                     "input_length": {"units": "count", "mean": 600.0, "min": 600, "max": 600}}


@pytest.mark.parametrize("bench", BENCHES)
def test_every_benchs_result_shape_exports_a_valid_document(bench):
    result = _result(bench)
    assert validate_document(result) == []  # the recording is still a result of today's schema
    doc = br_document(Result.from_dict(result, bench), uid="u", eid="e", evidence=EVIDENCE)
    assert br_problems(doc) == []
    aggregate, perf = _aggregate(doc), result["performance"]
    assert aggregate["latency"]["time_to_first_token"]["p99"] == perf["ttft_ms"]["p99"]
    assert aggregate["latency"]["inter_token_latency"] == {
        "units": "ms/token", **{br: perf["itl_token_ms"][k] for k, br in (("mean", "mean"), ("std", "stddev"),
                                ("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"),
                                ("max", "max")) if k in perf["itl_token_ms"]}}
    assert aggregate["requests"]["total"] == sum(result["correctness"]["termination_counts"].values())
    assert f"infkit-workload-id:{result['identity']['workload_id']}" in doc["run"]["keywords"]


def test_what_infkit_did_not_measure_is_left_out():
    base = read_result(EXAMPLES / "serving-single.json")
    result = replace(base, performance=replace(base.performance, throughput=None, tpot_ms=None),  # no itl_token_ms
                     correctness=replace(base.correctness, termination_counts={"length": 6, "error": 1, "not_sent": 1}))
    aggregate = _aggregate(br_document(result, uid="u", eid=None, evidence=None))
    assert set(aggregate) == {"requests", "latency"}
    assert set(aggregate["latency"]) == {"time_to_first_token", "request_latency"}
    assert aggregate["requests"] == {"total": 7, "failures": 1}  # the list's lengths are not the sent ones'
    unsent = replace(base, correctness=replace(base.correctness, termination_counts={"not_sent": 8}),  # a failed start
                     performance=replace(base.performance, **dict.fromkeys(("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                                                                             "throughput"))))
    doc = br_document(unsent, uid="u", eid=None, evidence=None)
    assert doc == {"version": BR_VERSION, "run": {"uid": "u"}, "results": {}} and br_problems(doc) == []


def _signed_bench_run(root: Root, bench: str, *, valid: bool = True):
    """A signed run directory holding one recorded serving result of ``bench`` under arms/<arm>/r1/."""
    result = _result(bench)
    if not valid:
        result["conclusion"].update(valid=False, invalid_reasons=["client send lag"])
        if result["conclusion"]["evidence_level"] != "single":
            result["conclusion"]["evidence_level"] = "single"
    identity = result["identity"]
    run_dir = root.path / "runs" / bench / (identity["run_id"] + ("" if valid else "-invalid"))
    identity["run_id"] = run_dir.name
    write_run_record(run_dir, RunRecord(
        semantic_id=identity["semantic_id"], run_id=run_dir.name, run_label=identity["run_label"], requested={},
        effective={}, evidence_level="single", decision="inconclusive", command=["infkit", "bench", bench[-2:]],
        images=[native_image("INF-CPU")], model=identity["model"], tokenizer=identity["tokenizer"],
        workload_ids=[identity["workload_id"]], ended_utc=identity["created_utc"]))
    shutil.copy(EXAMPLES / "fingerprint-no-gpu.json", run_dir / "fingerprint.json")
    for folder in ("arms/a/r1", "warmup/a"):  # a warm-up's result is the same shape, and unmeasured
        (run_dir / folder).mkdir(parents=True)
        (run_dir / folder / "result.json").write_text(json.dumps(result, indent=2))
    return sign(root, run_dir)


def test_report_exports_every_benchs_signed_run_with_its_evidence(tmp_path, capsys):
    (tmp_path / "root").mkdir()
    root = make_root(tmp_path / "root")
    runs = {bench: _signed_bench_run(root, bench) for bench in BENCHES}
    invalid = _signed_bench_run(root, "bench-70", valid=False)
    (key,) = (root.path / "manifests" / "keys").glob("*.pub.pem")
    out = tmp_path / "br"
    inputs = [str(r.manifest) for r in [*runs.values(), invalid]]
    assert main(["report", "--format", "br0.2.1", *inputs, "-o", str(out), "--root", str(root.path)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(BENCHES)} BR0.2.1 documents from {len(BENCHES)} runs" in printed
    assert "arms/a/r1/result.json: an invalid result, not exported (client send lag)" in printed
    for run in runs.values():
        written = out / run.run_dir.name / "arms" / "a" / "r1" / "result.br0.2.1.json"
        doc = json.loads(written.read_text())
        assert br_problems(doc) == [] and doc["run"]["eid"] == run.run_dir.name
        assert doc["run"]["uid"] == f"{run.run_dir.name}/arms/a/r1/result.json"
        result_bytes = (run.run_dir / "arms" / "a" / "r1" / "result.json").read_bytes()
        assert doc["run"]["keywords"][:3] == [
            f"infkit-manifest-sha256:{hashlib.sha256(run.manifest.read_bytes()).hexdigest()}",
            f"infkit-signer-keyid:{key.name.removesuffix('.pub.pem')}",
            f"infkit-result-sha256:{hashlib.sha256(result_bytes).hexdigest()}"]
    assert not (out / invalid.run_dir.name).exists()
    assert sorted(p.relative_to(out).parts[1] for p in out.rglob("*.json")) == ["arms"] * len(BENCHES)


def test_report_exports_nothing_of_a_run_changed_after_signing(tmp_path, capsys):
    (tmp_path / "root").mkdir()
    root = make_root(tmp_path / "root")
    run = _signed_bench_run(root, "bench-69")
    (run.run_dir / "arms" / "a" / "r1" / "result.json").write_text("{}")
    out = tmp_path / "br"
    assert main(["report", "--format", "br0.2.1", str(run.manifest), "-o", str(out), "--root", str(root.path)]) == 0
    printed = capsys.readouterr().out
    assert "0 BR0.2.1 documents from 0 runs" in printed and "INVALID, not exported" in printed
    assert [p.name for p in out.iterdir()] == [".infkit-report"]


def test_make_report_passes_the_format_on():
    proc = subprocess.run(["make", "-C", str(HERE.parents[1]), "-n", "--no-print-directory", "report",
                           "FORMAT=br0.2.1", "RUNS=runs/x", "O=runs/br"], capture_output=True, text=True, timeout=60)
    (line,) = [x for x in proc.stdout.splitlines() if "infkit report runs/x" in x]
    assert line.split("infkit report ", 1)[1].split(";")[0].split() == ["runs/x", "-o", "'runs/br'", "--format",
                                                                     "br0.2.1"], line
