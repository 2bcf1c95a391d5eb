"""Bad input: each case is INVALID with a clear reason, exit 1, never a traceback."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from manifest_helpers import audit_json, reasons

from harness.cli import main


def _envelope(manifest: Path) -> dict:
    return json.loads(manifest.read_text())


def _truncate_payload(env: dict) -> None:
    env["payload"] = env["payload"][:-3]


def _truncate_sig(env: dict) -> None:
    env["signatures"][0]["sig"] = env["signatures"][0]["sig"][:-5]


def _payload_not_statement(env: dict) -> None:
    env["payload"] = base64.b64encode(b"[1, 2, 3]").decode()


CASES = {
    "not-json": (lambda m: m.write_text("this is not JSON {"), "envelope", "not a JSON document"),
    "empty": (lambda m: m.write_bytes(b""), "envelope", "not a JSON document"),
    "binary": (lambda m: m.write_bytes(bytes(range(256))), "envelope", "not a JSON document"),
    "json-array": (lambda m: m.write_text("[]"), "envelope", "expected an object"),
    "no-signatures-field": (
        lambda m: m.write_text(json.dumps({k: v for k, v in _envelope(m).items() if k != "signatures"})),
        "envelope", "missing signatures",
    ),
    "wrong-payload-type": (
        lambda m: m.write_text(json.dumps({**_envelope(m), "payloadType": "text/plain"})),
        "envelope", "payloadType is 'text/plain', expected 'application/vnd.in-toto+json'",
    ),
    "truncated-payload-base64": (
        lambda m: m.write_text(json.dumps(_mutated(m, _truncate_payload))), "envelope", "payload is not valid base64",
    ),
    "truncated-signature-base64": (
        lambda m: m.write_text(json.dumps(_mutated(m, _truncate_sig))), "envelope",
        "signatures[0].sig is not valid base64",
    ),
    "empty-signatures": (
        lambda m: m.write_text(json.dumps({**_envelope(m), "signatures": []})), "envelope", "no signatures",
    ),
    "payload-not-a-statement": (
        lambda m: m.write_text(json.dumps(_mutated(m, _payload_not_statement))), "statement", "not a JSON object",
    ),
}


def _mutated(manifest: Path, edit) -> dict:
    env = _envelope(manifest)
    edit(env)
    return env


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_manifest_is_invalid_with_reason(signed_run, capsys, case):
    corrupt, check, text = CASES[case]
    corrupt(signed_run.manifest)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1 and doc["manifests"][0]["verdict"] == "INVALID"
    assert any(c == check and text in m for c, m in reasons(doc)), reasons(doc)


def test_missing_trusted_key_file(signed_run, capsys, tmp_path):
    rc, doc = audit_json(signed_run, capsys, "--trusted-key", str(tmp_path / "missing.pub.pem"))
    assert rc == 1
    assert any(c == "key" and "missing.pub.pem: no such file" in m for c, m in reasons(doc))
    assert ("signature", "not verified: no usable trusted key") in reasons(doc)


def test_trusted_key_that_is_not_a_key(signed_run, capsys, tmp_path):
    bogus = tmp_path / "bogus.pub.pem"
    bogus.write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    rc, doc = audit_json(signed_run, capsys, "--trusted-key", str(bogus))
    assert rc == 1
    assert any(c == "key" and "not a PEM public key" in m for c, m in reasons(doc))


def test_no_published_keys(signed_run, capsys):
    for pub in (signed_run.root / "manifests" / "keys").glob("*.pub.pem"):
        pub.unlink()
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1
    assert any(c == "key" and "no trusted public key" in m for c, m in reasons(doc))


def test_missing_manifest_file(signed_run, capsys):
    rc, doc = audit_json(signed_run, capsys, manifest=signed_run.root / "nope.intoto.json")
    assert rc == 1 and ("envelope", "no such file") in reasons(doc)


def test_directory_without_manifests_is_a_one_line_error(tmp_path, capsys):
    assert main(["audit", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("infkit audit: error: no *.intoto.json manifests under") and "\n" not in err


def test_cli_never_prints_a_traceback(signed_run):
    signed_run.manifest.write_text('{"payloadType": 1, "payload": [], "signatures": {}}')
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "audit", str(signed_run.manifest), "--root", str(signed_run.root)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "INVALID" in proc.stdout and "Traceback" not in proc.stderr + proc.stdout


def test_mixed_paths_audit_each_and_fail_overall(signed_run, capsys, tmp_path):
    good = signed_run.manifest
    bad = good.parent / "broken.intoto.json"
    bad.write_text("{")
    rc, doc = audit_json(signed_run, capsys, manifest=good.parent)
    assert rc == 1
    verdicts = {Path(m["manifest"]).name: m["verdict"] for m in doc["manifests"]}
    assert verdicts == {good.name: "VALID", bad.name: "INVALID"}
