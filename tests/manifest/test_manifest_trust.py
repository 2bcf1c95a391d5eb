"""Trust is the auditor's decision: a trust policy of key ids, not whatever keys a repository holds.

A forger who can write to the repository signs a fabricated run with their own key and drops its
public key into manifests/keys/. Plain ``make audit`` flags it (VALID-UNTRUSTED: integrity only);
``make audit TRUST=policy`` fails it; a run signed with a listed key passes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_helpers import REPO, assert_clean_error, infkit
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from manifest_helpers import audit_json, make_run, reasons

from harness.manifest import sign_run
from harness.manifest.keys import key_id, load_signing_key
from harness.manifest.report import EXIT_UNTRUSTED
from harness.manifest.trust import add_to_policy


def make_audit(root: Path, trust: Path | None = None, *, allow_untrusted: bool = False) -> subprocess.CompletedProcess:
    """``make audit`` as a user runs it, on the manifests under ``root`` (setup is taken as done)."""
    args = ["make", "-s", "-C", str(REPO), "-o", "setup", "audit", f"AUDIT_ROOT={root}",
            f"INFKIT={sys.executable} -m harness"]
    if trust is not None:
        args.append(f"TRUST={trust}")
    if allow_untrusted:
        args.append("ALLOW_UNTRUSTED=1")
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


@pytest.fixture
def genuine(tmp_path):
    """A run signed with this machine's key, and a trust policy (outside the repository) naming it."""
    run = make_run(tmp_path / "genuine")
    run.manifest = sign_run(run.run_dir, root=run.root)
    policy = add_to_policy(tmp_path / "auditor" / "trust.json", load_signing_key().keyid, "the publisher")
    return run, policy


@pytest.fixture
def forged(tmp_path):
    """A fabricated run signed with an attacker's key, whose public key is published in the repository."""
    run = make_run(tmp_path / "forged", decision="inconclusive")
    result = run.run_dir / "result.json"
    doc = json.loads(result.read_text())
    doc["conclusion"]["summary"] = "fabricated"
    result.write_text(json.dumps(doc))
    pem = tmp_path / "attacker.pem"
    private = Ed25519PrivateKey.generate()
    pem.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pem.chmod(0o600)
    run.manifest = sign_run(run.run_dir, root=run.root, key_path=pem)
    return run, key_id(private.public_key())


def test_a_forged_run_fails_make_audit_with_a_trust_policy(genuine, forged):
    _, policy = genuine
    run, attacker = forged
    proc = make_audit(run.root, policy)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert ": INVALID" in proc.stdout
    assert f"[trust] signed by key {attacker[:16]}..., which the trust policy {policy} does not list" in proc.stdout


def test_plain_make_audit_flags_the_forged_run(forged):
    run, attacker = forged
    proc = make_audit(run.root)
    # intact files by a signer no policy lists: `make audit` (a CI step) fails; audit has its own status
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert f"(exit status {EXIT_UNTRUSTED})" in proc.stdout
    assert f"{run.rel(run.manifest)}: VALID-UNTRUSTED" in proc.stdout
    assert f"signer {attacker[:16]}... was found in the audited repository, not pinned" in proc.stdout
    assert "1 manifest: 0 VALID, 1 VALID-UNTRUSTED, 0 INVALID" in proc.stdout
    assert "pass one (--trust FILE, make audit TRUST=FILE)" in proc.stdout
    allowed = make_audit(run.root, allow_untrusted=True)
    assert allowed.returncode == 0 and "VALID-UNTRUSTED" in allowed.stdout, allowed.stdout + allowed.stderr


def test_a_run_signed_with_a_listed_key_passes(genuine):
    run, policy = genuine
    proc = make_audit(run.root, policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{run.rel(run.manifest)}: VALID\n" in proc.stdout and "1 manifest: 1 VALID, 0 INVALID" in proc.stdout
    assert "VALID-UNTRUSTED" not in proc.stdout


def test_a_key_file_must_be_named_after_its_key(genuine, forged, capsys):
    """The attacker publishes their key under the genuine key's name: it is not used, and it is reported."""
    _, policy = genuine
    run, attacker = forged
    keys = run.root / "manifests" / "keys"
    (keys / f"{attacker}.pub.pem").rename(keys / f"{policy_keyid(policy)}.pub.pem")
    rc, doc = audit_json(run, capsys, "--trust", str(policy))
    assert rc == 1
    (warning,) = doc["manifests"][0]["warnings"]  # reported, not used, and no verdict of its own
    assert f"holds key {attacker[:16]}" in warning and "named after the key it holds" in warning
    assert "key" not in {c for c, _ in reasons(doc)}


def policy_keyid(policy: Path) -> str:
    return json.loads(policy.read_text())["keys"][0]["keyid"]


def test_a_listed_key_whose_public_key_is_gone_does_not_verify(genuine, capsys):
    run, policy = genuine
    (run.root / "manifests" / "keys" / f"{policy_keyid(policy)}.pub.pem").unlink()
    (run.root / "manifests" / "keys" / "other.txt").write_text("not a key")
    rc, doc = audit_json(run, capsys, "--trust", str(policy))
    assert rc == 1
    assert any(c == "signature" and "the trust policy lists key" in m and "no public key file" in m
               for c, m in reasons(doc))


def test_a_key_handed_over_with_trusted_key_is_trusted(genuine, capsys):
    run, policy = genuine
    pem = run.root / "manifests" / "keys" / f"{policy_keyid(policy)}.pub.pem"
    rc, doc = audit_json(run, capsys, "--trusted-key", str(pem))
    assert rc == 0 and doc["trusted"] is True and doc["manifests"][0]["verdict"] == "VALID"
    rc, doc = audit_json(run, capsys)  # the local trust policy lists this machine's key
    assert rc == 0 and doc["trusted"] is True and doc["manifests"][0]["verdict"] == "VALID"


def test_keys_trust_builds_the_policy_idempotently(genuine, tmp_path, key_home):
    run, _ = genuine
    policy = tmp_path / "mine" / "trust.json"
    for _ in range(2):
        made = infkit("keys", "trust", str(policy), "--owner", "the publisher", env={"XDG_CONFIG_HOME": str(key_home)})
        assert made.returncode == 0, made.stderr
    assert json.loads(policy.read_text()) == {"schema": "infkit/trust-policy/v1",
                                              "keys": [{"keyid": load_signing_key().keyid, "owner": "the publisher"}]}
    assert infkit("validate", str(policy)).returncode == 0
    assert infkit("audit", str(run.manifest), "--root", str(run.root), "--trust", str(policy)).returncode == 0


BAD_POLICIES = {
    "missing": (None, "no such file"),
    "not-json": ("{", "malformed JSON"),
    "an-array": ("[]", "a document is a JSON object, not an array"),
    "another-document": ('{"schema": "infkit/run/v1"}', "not a trust policy (infkit/trust-policy/v1)"),
    "bad-keyid": ('{"schema": "infkit/trust-policy/v1", "keys": [{"keyid": "abc"}]}', "does not match"),
    "no-keys": ('{"schema": "infkit/trust-policy/v1", "keys": []}', "should be non-empty"),
    "nan": ('{"schema": "infkit/trust-policy/v1", "keys": [{"keyid": NaN}]}', "NaN (JSON numbers must be finite)"),
}


@pytest.mark.parametrize("case", sorted(BAD_POLICIES))
def test_a_bad_policy_is_a_one_line_error(genuine, tmp_path, case):
    run, _ = genuine
    content, expected = BAD_POLICIES[case]
    policy = tmp_path / "bad-policy.json"
    if content is not None:
        policy.write_text(content)
    proc = infkit("audit", str(run.manifest), "--root", str(run.root), "--trust", str(policy))
    assert_clean_error(proc, expected)


def test_make_audit_refuses_a_missing_policy_file(genuine, tmp_path):
    run, _ = genuine
    proc = make_audit(run.root, tmp_path / "nope.json")
    assert proc.returncode != 0 and "TRUST=" in proc.stderr and "no such trust policy file" in proc.stderr
