"""Every tamper case: artifacts, payload, signature, keys, deleted/added files, escaping paths."""

from __future__ import annotations

import base64
import builtins
import json
import os
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from manifest_helpers import audit, audit_json, make_run, reasons, resign
from securesystemslib.dsse import Envelope

from harness.manifest import dsse, sign_run
from harness.manifest.keys import init_key, public_pem

ARTIFACTS = ["run.json", "fingerprint.json", "result.json", "requests.jsonl", "server.log", "plots/ttft.png"]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("artifact", ARTIFACTS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_changed_byte_in_any_artifact(signed_run, capsys, artifact, where):
    path = signed_run.run_dir / artifact
    size = path.stat().st_size
    _flip(path, {"first": 0, "middle": size // 2, "last": size - 1}[where])
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1 and not doc["valid"]
    (digest,) = [m for c, m in reasons(doc) if c == "subject-digest"]
    assert digest.startswith(f"modified: {signed_run.rel(path)}: sha256 ")


def _edit_envelope(manifest: Path, edit) -> None:
    envelope = json.loads(manifest.read_text())
    edit(envelope)
    manifest.write_text(json.dumps(envelope))


def test_one_changed_byte_in_the_payload(signed_run, capsys):
    def edit(envelope):
        payload = bytearray(base64.b64decode(envelope["payload"]))
        at = payload.index(b"shared-prefix/cache-on")
        payload[at] = ord("S")
        envelope["payload"] = base64.b64encode(bytes(payload)).decode()

    _edit_envelope(signed_run.manifest, edit)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    checks = [m for c, m in reasons(doc) if c == "signature"]
    assert any(m.startswith("securesystemslib:") for m in checks)
    assert any(m.startswith("cryptography:") for m in checks)
    # nothing the forged statement names is opened before its signature verifies
    assert [c for c, _ in reasons(doc) if c not in ("signature",)] == ["subjects-unchecked"]
    assert doc["manifests"][0]["subjects_verified"] == 0


@pytest.mark.parametrize("byte", [0, 31, 63])
def test_one_changed_byte_in_the_signature(signed_run, capsys, byte):
    def edit(envelope):
        sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
        sig[byte] ^= 0x80
        envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()

    _edit_envelope(signed_run.manifest, edit)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert {m.split(":")[0] for c, m in reasons(doc) if c == "signature"} == {"securesystemslib", "cryptography"}
    assert "subjects-unchecked" in {c for c, _ in reasons(doc)}


def test_statement_signed_by_another_key(signed_run, tmp_path, capsys):
    other = init_key(tmp_path / "other.pem")
    resign(signed_run.manifest, lambda s: None, key=other)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert any("not among the trusted keys" in m for c, m in reasons(doc) if c == "signature")


def test_audit_trusting_another_key(signed_run, tmp_path, capsys):
    other_pub = tmp_path / "other.pub.pem"
    other_pub.write_bytes(public_pem(init_key(tmp_path / "other.pem").public_key))
    rc, doc = audit_json(signed_run, capsys, "--trusted-key", str(other_pub))
    assert rc == 1
    assert any("not among the trusted keys" in m for c, m in reasons(doc) if c == "signature")


def test_deleted_artifact_is_reported(signed_run, capsys):
    (signed_run.run_dir / "server.log").unlink()
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert ("subject-deleted", f"deleted: {signed_run.rel(signed_run.run_dir / 'server.log')} "
            "is in the manifest but not on disk") in reasons(doc)


def test_added_unlisted_file_is_reported(signed_run, capsys):
    extra = signed_run.run_dir / "plots" / "extra.png"
    extra.write_bytes(b"not signed")
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert ("unlisted-file", f"added: {signed_run.rel(extra)} is not in the manifest") in reasons(doc)


@pytest.mark.parametrize("name", ["../outside/secret.txt", "runs/../../outside/secret.txt", "/etc/hostname",
                                  "runs/./x", "runs//x"])
def test_escaping_subject_is_invalid_and_not_read(signed_run, capsys, monkeypatch, name):
    outside = signed_run.root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the root")
    resign(signed_run.manifest, lambda s: s["subject"].append({"name": name, "digest": {"sha256": "0" * 64}}))
    opened = _record_opens(monkeypatch)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert any(c == "subject-path" and name in m for c, m in reasons(doc))
    assert os.path.realpath(signed_run.run_dir / "server.log") in opened  # the recorder sees reads
    assert not [p for p in opened if not p.startswith(os.path.realpath(signed_run.root) + os.sep)]


def test_symlink_escaping_the_root_is_invalid_and_not_read(signed_run, capsys, monkeypatch):
    outside = signed_run.root.parent / "outside.txt"
    outside.write_text("outside the root")
    log = signed_run.run_dir / "server.log"
    log.unlink()
    os.symlink(outside, log)
    opened = _record_opens(monkeypatch)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert ("subject-path", f"subject '{signed_run.rel(log)}' resolves through a symlink to a path outside "
            "the root; not read") in reasons(doc)
    assert os.path.realpath(signed_run.run_dir / "result.json") in opened
    assert os.path.realpath(outside) not in opened


def _record_opens(monkeypatch) -> list[str]:
    opened: list[str] = []
    real_open = builtins.open

    def recording_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            opened.append(os.path.realpath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    return opened


def test_cryptography_check_fails_on_its_own_when_securesystemslib_is_bypassed(signed_run, capsys, monkeypatch):
    def tamper(envelope):
        sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
        sig[5] ^= 0x01
        envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()

    _edit_envelope(signed_run.manifest, tamper)
    # securesystemslib now accepts anything it is shown
    monkeypatch.setattr(Envelope, "verify", lambda self, keys, threshold: {k.keyid: k for k in keys})
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    sig_reasons = [m for c, m in reasons(doc) if c == "signature"]
    assert sig_reasons and all(m.startswith("cryptography:") for m in sig_reasons)


def test_securesystemslib_check_fails_on_its_own_when_cryptography_is_bypassed(signed_run, capsys, monkeypatch):
    resign(signed_run.manifest, lambda s: None, key=init_key(signed_run.root.parent / "other.pem"))
    monkeypatch.setattr(dsse, "verify_cryptography", lambda envelope, trusted: (next(iter(trusted)), None))
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    sig_reasons = [m for c, m in reasons(doc) if c == "signature"]
    assert sig_reasons and all(m.startswith("securesystemslib:") for m in sig_reasons)


def test_adopt_without_paired_evidence_is_invalid(signed_run, capsys):
    resign(signed_run.manifest, lambda s: s["predicate"].update(decision="adopt"))
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    messages = [m for c, m in reasons(doc) if c == "evidence"]
    assert any(m.startswith("adopt-reject-need-paired") for m in messages)
    assert any(m.startswith("verdict-backed-by-result") for m in messages)
    assert any(m.startswith("run-record-matches: predicate decision") for m in messages)


def test_paired_claim_without_paired_result_is_invalid(tmp_path, capsys):
    run = make_run(tmp_path, decision="adopt", evidence_level="paired", results=("serving-single.json",))
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1
    messages = [m for c, m in reasons(doc) if c == "evidence"]
    assert "level-backed-by-results: predicate claims paired, strongest result is single" in messages
    assert "verdict-backed-by-result: no paired or start-pooled result in the run decides adopt" in messages


def test_failure_with_a_decision_is_invalid(tmp_path, capsys):
    run = make_run(tmp_path, decision="adopt", evidence_level="paired",
                   results=("serving-failed-blocked.json", "comparison-paired-adopt.json"))
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1
    assert any(m.startswith("failure-blocks-decision: ") and "result.json records a failure" in m
               for c, m in reasons(doc) if c == "evidence")


def test_invalid_artifact_is_reported_with_its_schema_problem(tmp_path, capsys):
    run = make_run(tmp_path)
    result = json.loads((run.run_dir / "result.json").read_text())
    result["performance"]["ttft_ms"]["p50"] = 1e6  # breaks the percentile order
    (run.run_dir / "result.json").write_text(json.dumps(result))
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 1
    assert any(c == "artifact-schema" and "percentiles-ordered" in m for c, m in reasons(doc))


def test_every_reason_is_listed_at_once(signed_run, capsys):
    (signed_run.run_dir / "server.log").write_text("changed")
    (signed_run.run_dir / "requests.jsonl").unlink()
    (signed_run.run_dir / "new.txt").write_text("new")
    assert audit(signed_run) == 1
    out = capsys.readouterr().out
    assert f"{signed_run.manifest}: INVALID (3 reasons)" in out
    for check in ("[subject-digest]", "[subject-deleted]", "[unlisted-file]"):
        assert check in out


def test_public_key_pem_is_standard(signed_run):
    (pub,) = (signed_run.root / "manifests" / "keys").glob("*.pub.pem")
    assert serialization.load_pem_public_key(pub.read_bytes())


def test_subject_under_a_symlinked_directory_escaping_the_root(signed_run, capsys, monkeypatch):
    outside = signed_run.root.parent / "outside-dir"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the root")
    os.symlink(outside, signed_run.root / "escape")
    resign(signed_run.manifest, lambda s: s["subject"].append(
        {"name": "escape/secret.txt", "digest": {"sha256": "0" * 64}}))
    opened = _record_opens(monkeypatch)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert ("subject-path", "subject 'escape/secret.txt' resolves through a symlink to a path outside the root; "
            "not read") in reasons(doc)
    assert os.path.realpath(outside / "secret.txt") not in opened


def test_deleted_folders_are_one_reason_each(signed_run, capsys):
    shutil.rmtree(signed_run.run_dir / "plots")
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert reasons(doc) == [("subject-deleted", f"deleted: folder {signed_run.rel(signed_run.run_dir / 'plots')} "
                             "is gone, with its 1 listed file")]
    shutil.rmtree(signed_run.run_dir)
    rc, doc = audit_json(signed_run, capsys)
    deleted = [m for c, m in reasons(doc) if c == "subject-deleted"]
    assert deleted == [f"deleted: folder {signed_run.rel(signed_run.run_dir)} is gone, with its 6 listed files"]


def test_predicate_fingerprint_must_be_the_signed_subject(signed_run, capsys):
    resign(signed_run.manifest, lambda s: s["predicate"]["fingerprint"].update(sha256="sha256:" + "1" * 64))
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert [c for c, _ in reasons(doc)] == ["predicate"]
    assert "is not a subject with the digest the predicate names" in reasons(doc)[0][1]


def test_several_trusted_keys_one_of_them_the_signer(signed_run, tmp_path, capsys):
    other_pub = tmp_path / "other.pub.pem"
    other_pub.write_bytes(public_pem(init_key(tmp_path / "other.pem").public_key))
    (signer,) = (signed_run.root / "manifests" / "keys").glob("*.pub.pem")
    rc, doc = audit_json(signed_run, capsys, "--trusted-key", str(other_pub), str(signer))
    assert rc == 0 and doc["manifests"][0]["signer_keyid"] == signer.name.removesuffix(".pub.pem")
