"""The result builder: validated before written, written atomically, typed groups."""

from __future__ import annotations

import json
import os

import pytest

from harness.contract import (
    Conclusion,
    Correctness,
    Identity,
    Performance,
    WorkloadInfo,
    atomic_write_text,
    build_result,
    write_result,
)
from harness.errors import SchemaViolation
from harness.rundir.fingerprint import environment_group

WID = "sha256:" + "e" * 64


def _groups(**overrides):
    groups = dict(
        identity=Identity(semantic_id="INF-REQUEST-LIFECYCLE", workload_id=WID, run_label="tiny", run_id="r1",
                          model=None, tokenizer=None, null_reasons={"model": "simulated", "tokenizer": "simulated"}),
        workload=WorkloadInfo(request_count=3, input_tokens={"min": 4, "max": 8, "mean": 6.0, "total": 18},
                              output_tokens={"min": 2, "max": 2, "mean": 2.0, "total": 6},
                              arrival={"process": "constant", "rate_rps": 1.0}, concurrency=None, seed=7,
                              null_reasons={"concurrency": "open loop"}),
        environment=environment_group("INF-CPU", "simulator", "0.1.0", doc=_fp()),
        performance=Performance.not_applicable("simulated lifecycle has no measured latency"),
        correctness=Correctness(output_count=3, termination_counts={"stop": 3}, quality=None,
                                null_reasons={"quality": "no reference"}),
        conclusion=Conclusion(evidence_level="precheck", decision="inconclusive", next_step="run on a server"),
    )
    groups.update(overrides)
    return groups


def _fp():
    return json.loads(open(os.path.join(os.path.dirname(__file__), "examples/valid/fingerprint-no-gpu.json")).read())


def test_build_result_is_valid_and_states_null_reasons():
    doc = build_result(kind="simulation", **_groups())
    assert doc["performance"]["ttft_ms"] is None
    assert doc["performance"]["null_reasons"]["ttft_ms"] == "simulated lifecycle has no measured latency"
    assert doc["environment"]["null_reasons"]["gpu"]


def test_invalid_result_is_never_written(tmp_path):
    bad = _groups(conclusion=Conclusion(evidence_level="single", decision="adopt", next_step="x"))
    with pytest.raises(SchemaViolation) as info:
        build_result(kind="simulation", **bad)
    assert "adopt/reject need paired evidence" in str(info.value)
    good = build_result(kind="simulation", **_groups())
    good["conclusion"]["decision"] = "adopt"
    target = tmp_path / "result.json"
    with pytest.raises(SchemaViolation):
        write_result(target, good)
    assert list(tmp_path.iterdir()) == []


def test_write_result_roundtrip(tmp_path):
    doc = build_result(kind="simulation", **_groups())
    path = write_result(tmp_path / "out" / "result.json", doc)
    assert json.loads(path.read_text()) == doc
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("old")

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_negative_latency_rejected():
    dist = {"n": 1, "mean": -1.0, "p50": -1.0, "p95": -1.0, "p99": -1.0}
    groups = _groups(performance=Performance.not_applicable("x", ttft_ms=dist))
    with pytest.raises(SchemaViolation, match="minimum of 0"):
        build_result(kind="simulation", **groups)
