"""The verification recipes docs/manifests.md shows, run as written on a freshly signed run.

Each recipe is taken from the page (the fenced block after its ``<!-- recipe: NAME -->`` marker),
with ``<run_id>`` and ``<keyid>`` filled in; it must accept the signed run and reject it once a
byte of the signed statement or of a subject changes.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from manifest_helpers import RUN_ID, Run

DOC = Path(__file__).resolve().parents[2] / "docs" / "manifests.md"
REQUIRE = os.environ.get("CI") == "true"  # CI installs every tool a recipe needs (.ci/setup-verify.sh)


def recipe(name: str, run: Run) -> str:
    """The recipe's lines from the page, placeholders filled in for ``run``."""
    match = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```\w+\n(.*?)\n```", DOC.read_text(), re.S)
    assert match, f"docs/manifests.md has no recipe {name!r}"
    (key,) = (run.root / "manifests" / "keys").glob("*.pub.pem")
    return match.group(1).replace("<run_id>", RUN_ID).replace("<keyid>", key.name.removesuffix(".pub.pem"))


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing and not REQUIRE:
        pytest.skip(f"not installed here: {', '.join(missing)}")
    assert not missing, f"CI must provide {missing}"


def _shell(run: Run) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", recipe("openssl", run)], cwd=run.root,
                          capture_output=True, text=True, timeout=60)


def _python(name: str, run: Run) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", recipe(name, run)], cwd=run.root, capture_output=True, text=True,
                          timeout=60)


def _edit_statement(run: Run, change) -> None:
    """Change the signed statement in place, leaving the signature as it was."""
    envelope = json.loads(run.manifest.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    change(statement)
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    run.manifest.write_text(json.dumps(envelope))


def test_openssl_recipe_verifies_signature_key_id_and_subjects(signed_run):
    _need("jq", "openssl", "sha256sum", "base64")
    proc = _shell(signed_run)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (key,) = (signed_run.root / "manifests" / "keys").glob("*.pub.pem")
    assert "Signature Verified Successfully" in proc.stdout
    assert f"key id {key.name.removesuffix('.pub.pem')}" in proc.stdout


def test_openssl_recipe_rejects_an_edited_statement(signed_run):
    _need("jq", "openssl", "sha256sum", "base64")
    _edit_statement(signed_run, lambda s: s["predicate"].update(decision="adopt"))
    proc = _shell(signed_run)
    assert proc.returncode != 0 and "Signature Verification Failure" in proc.stdout + proc.stderr


def test_openssl_recipe_rejects_a_changed_subject(signed_run):
    _need("jq", "openssl", "sha256sum", "base64")
    (signed_run.run_dir / "server.log").write_text("INFO started\nINFO edited\n")
    proc = _shell(signed_run)
    assert proc.returncode != 0 and "server.log: FAILED" in proc.stdout


def test_openssl_recipe_rejects_a_key_id_that_is_not_the_key(signed_run):
    _need("jq", "openssl", "sha256sum", "base64")
    envelope = json.loads(signed_run.manifest.read_text())
    envelope["signatures"][0]["keyid"] = "0" * 64  # the signature itself still verifies
    signed_run.manifest.write_text(json.dumps(envelope))
    proc = _shell(signed_run)
    assert proc.returncode != 0 and "Signature Verified Successfully" in proc.stdout and "key id" not in proc.stdout


def test_securesystemslib_recipe_verifies_with_the_key_id_given(signed_run):
    proc = _python("securesystemslib", signed_run)
    assert proc.returncode == 0, proc.stderr
    (key,) = (signed_run.root / "manifests" / "keys").glob("*.pub.pem")
    assert proc.stdout.strip() == repr([key.name.removesuffix(".pub.pem")])


def test_securesystemslib_rejects_the_manifest_under_its_own_default_key_id(signed_run):
    """Why the page gives the key id: securesystemslib's default key id differs from infkit's."""
    code = recipe("securesystemslib", signed_run).replace(", keyid=keyid)", ")")
    proc = subprocess.run([sys.executable, "-c", code], cwd=signed_run.root, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "VerificationError" in proc.stderr


def test_securesystemslib_recipe_rejects_an_edited_statement(signed_run):
    _edit_statement(signed_run, lambda s: s["predicate"].update(decision="adopt"))
    proc = _python("securesystemslib", signed_run)
    assert proc.returncode != 0 and "VerificationError" in proc.stderr


def test_in_toto_attestation_recipe_accepts_the_statement_shape(signed_run):
    proc = _python("in-toto-attestation", signed_run)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "https://infkit.dev/manifest/v1 6 subjects"


def test_in_toto_attestation_recipe_rejects_a_subject_without_a_digest(signed_run):
    _edit_statement(signed_run, lambda s: s["subject"][0].update(digest={}))
    proc = _python("in-toto-attestation", signed_run)
    assert proc.returncode != 0 and "At least one digest required" in proc.stderr
