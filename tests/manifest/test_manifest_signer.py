"""Who signs: exit 0 means valid and trusted, `keys init` trusts its own key locally, and a private key
others can read or write, or one inside the run directory, is never used."""

from __future__ import annotations

import json

import pytest
from manifest_helpers import audit, audit_json, make_run

from harness.cli import main
from harness.errors import InvalidInput
from harness.manifest import sign_run
from harness.manifest.keys import default_private_key_path, init_key, load_signing_key
from harness.manifest.report import EXIT_UNTRUSTED
from harness.manifest.trust import local_policy_path


def test_keys_init_trusts_its_key_locally_so_own_runs_audit_valid(tmp_path, capsys):
    run = make_run(tmp_path / "repo")
    assert main(["keys", "init", "--root", str(run.root)]) == 0
    keyid = load_signing_key().keyid
    policy = json.loads(local_policy_path().read_text())
    assert [k["keyid"] for k in policy["keys"]] == [keyid]
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 0 and doc["manifests"][0]["verdict"] == "VALID" and doc["exit_status"] == 0


def test_a_foreign_signer_gets_its_own_exit_status(tmp_path, capsys):
    run = make_run(tmp_path / "repo")
    stranger = init_key(tmp_path / "stranger.pem", trust=False)  # e.g. an attacker's fresh key
    run.manifest = sign_run(run.run_dir, root=run.root, key_path=stranger.source)
    rc, doc = audit_json(run, capsys)
    assert rc == EXIT_UNTRUSTED and doc["manifests"][0]["verdict"] == "VALID-UNTRUSTED"
    assert audit(run, "--allow-untrusted") == 0
    assert audit(run, "--trusted-key", str(run.root / "manifests" / "keys" / f"{stranger.keyid}.pub.pem")) == 0


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o602])
def test_a_private_key_others_can_read_or_write_is_refused(tmp_path, mode):
    run = make_run(tmp_path / "repo")
    key = init_key(tmp_path / "k.pem", trust=False)
    (tmp_path / "k.pem").chmod(mode)
    with pytest.raises(InvalidInput, match=f"mode {mode:04o} lets other users read or write it"):
        sign_run(run.run_dir, root=run.root, key_path=key.source)
    assert not (run.root / "manifests").exists()


def test_the_default_key_with_a_loose_mode_is_refused(tmp_path):
    run = make_run(tmp_path / "repo")
    init_key()
    default_private_key_path().chmod(0o644)
    with pytest.raises(InvalidInput, match="chmod 600"):
        sign_run(run.run_dir, root=run.root)


def test_a_private_key_inside_the_run_dir_is_refused(tmp_path, monkeypatch):
    run = make_run(tmp_path / "repo")
    key = init_key(run.run_dir / "signing.pem", trust=False)
    with pytest.raises(InvalidInput, match="lies inside the run directory"):
        sign_run(run.run_dir, root=run.root, key_path=key.source)
    monkeypatch.setenv("INFKIT_SIGNING_KEY", key.source)
    with pytest.raises(InvalidInput, match="lies inside the run directory"):
        sign_run(run.run_dir, root=run.root)
    assert not (run.root / "manifests").exists()
