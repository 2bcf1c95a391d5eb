"""What audit accepts: evidence needs a verified result, oversized documents are findings, a manifest's
path is bound to the run it signs, the predicate's machine facts are recomputed from the signed
fingerprint, nothing is opened before the signature verifies, and the summary is safe on a terminal."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from manifest_helpers import audit, audit_json, make_run, reasons, resign

from harness.manifest import artifacts, sign_run, subjects
from harness.manifest.keys import init_key

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid_sha256": "sha256:" + "e" * 64,
        "memory_total_bytes": 85899345920, "compute_capability": "9.0", "vbios_version": None,
        "power_limit_w": 700.0, "ecc_mode": None, "mig_mode": None}


def checks(doc: dict) -> set[str]:
    return {c for c, _ in reasons(doc)}


@pytest.mark.parametrize("level", ["single", "repeated"])
def test_evidence_without_a_result_is_invalid(tmp_path, capsys, level):
    run = make_run(tmp_path, evidence_level=level, results=())  # run.json claims evidence, no result.json
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1
    assert any(m.startswith("result-behind-evidence:") for _, m in reasons(doc)), reasons(doc)


def test_a_result_without_its_schema_marker_backs_no_evidence(tmp_path, capsys):
    run = make_run(tmp_path)
    result = run.run_dir / "result.json"
    doc = json.loads(result.read_text())
    del doc["schema"]
    result.write_text(json.dumps(doc))
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1 and any("result-behind-evidence" in m for _, m in reasons(doc))


def test_a_precheck_without_a_result_is_a_valid_record(tmp_path, capsys):
    run = make_run(tmp_path, evidence_level="precheck", decision="blocked", results=())
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 0, reasons(doc)


def test_an_oversized_json_subject_is_a_finding(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(artifacts, "MAX_JSON_BYTES", 4096)  # the 32 MiB limit, scaled down
    run = make_run(tmp_path)
    (run.run_dir / "big.json").write_text(json.dumps({"schema": "infkit/result/v1", "pad": "x" * 8192}))
    (run.run_dir / "big.jsonl").write_text(json.dumps({"pad": "y" * 8192}) + "\n")
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1
    sized = sorted(r["path"] for m in doc["manifests"] for r in m["reasons"] if r["check"] == "artifact-size")
    assert sized == [run.rel(run.run_dir / "big.json"), run.rel(run.run_dir / "big.jsonl")]


def test_a_manifest_copied_over_another_runs_name_is_invalid(tmp_path, capsys):
    a = make_run(tmp_path)
    a.manifest = sign_run(a.run_dir, root=a.root)
    b_dir = a.root / "runs" / "69" / "20261130T090000Z-def456"
    shutil.copytree(a.run_dir, b_dir)
    record = json.loads((b_dir / "run.json").read_text())
    record["run_id"] = b_dir.name
    (b_dir / "run.json").write_text(json.dumps(record))
    b_manifest = sign_run(b_dir, root=a.root)
    shutil.copy(b_manifest, a.manifest)  # A is now covered by nothing
    rc, doc = audit_json(a, capsys, manifest=a.root / "manifests")
    assert rc == 1
    by_name = {os.path.basename(m["manifest"]): [r["message"] for r in m["reasons"]] for m in doc["manifests"]}
    assert any("a manifest's path must name the run it signs" in r for r in by_name[a.manifest.name])
    assert all(any("one run has one manifest" in r for r in rs) for rs in by_name.values()), by_name


def test_sign_refuses_a_manifest_path_under_manifests_that_names_another_run(tmp_path):
    from harness.errors import InvalidInput

    run = make_run(tmp_path)
    with pytest.raises(InvalidInput, match="the path `audit` binds to the run it signs"):
        sign_run(run.run_dir, root=run.root, out=run.root / "manifests" / "INF-PREFIX-CACHE" / "other.intoto.json")


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["fingerprint"].update(gpus=[H100], gpus_absent_reason=None), "fingerprint.gpus"),
    (lambda p: p["fingerprint"].update(driver_version="570.86.15"), "fingerprint.driver_version"),
    (lambda p: p["harness"].update(git_commit="f" * 40), "harness.git_commit"),
])
def test_predicate_machine_facts_are_recomputed_from_the_signed_fingerprint(signed_run, capsys, mutate, field):
    resign(signed_run.manifest, lambda s: mutate(s["predicate"]))
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert any(c == "predicate" and f"predicate {field} differs" in m for c, m in reasons(doc)), reasons(doc)


def test_nothing_is_opened_before_the_signature_verifies(signed_run, capsys, monkeypatch):
    def unsigned(statement):
        statement["subject"] *= 50  # one file many times: work an attacker chooses

    resign(signed_run.manifest, unsigned, key=init_key(signed_run.root.parent / "stranger.pem", trust=False))
    calls = []
    real = subjects.hash_file
    monkeypatch.setattr(artifacts, "hash_file", lambda *a, **k: calls.append(a) or real(*a, **k))
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1 and "subjects-unchecked" in checks(doc)
    assert calls == []


def test_one_file_under_two_names_is_read_once(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path)
    os.link(run.run_dir / "server.log", run.run_dir / "server-copy.log")
    run.manifest = sign_run(run.run_dir, root=run.root)
    calls = []
    real = subjects.hash_file
    monkeypatch.setattr(artifacts, "hash_file", lambda path, **k: calls.append(path) or real(path, **k))
    rc, _ = audit_json(run, capsys)
    assert rc == 0
    assert len(calls) == len(set(calls)) == 6  # seven names, six files


def test_terminal_escapes_in_audited_names_are_printed_escaped(signed_run, capsys):
    (signed_run.run_dir / "x\x1b[2K\x1b[1A\rVALID.log").write_text("planted")
    capsys.readouterr()
    assert audit(signed_run) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert "x\\x1b[2K\\x1b[1A\\rVALID.log" in out


def test_a_stray_file_in_the_keys_folder_is_a_warning_not_a_verdict(signed_run, capsys, tmp_path):
    from harness.manifest.keys import load_signing_key
    from harness.manifest.trust import add_to_policy

    policy = add_to_policy(tmp_path / "auditor" / "trust.json", load_signing_key().keyid)
    (signed_run.root / "manifests" / "keys" / "notes.pub.pem").write_text("not a key")
    rc, doc = audit_json(signed_run, capsys, "--trust", str(policy))
    assert rc == 0 and doc["manifests"][0]["verdict"] == "VALID", reasons(doc)
    (warning,) = doc["manifests"][0]["warnings"]
    assert "notes.pub.pem" in warning
