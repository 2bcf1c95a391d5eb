"""Sign a run directory, audit it: VALID; the envelope is a standard in-toto/DSSE document."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from manifest_helpers import (
    GIT_COMMIT,
    IMAGE_DIGEST,
    RUN_ID,
    audit,
    audit_json,
    make_run,
    read_statement,
)

from harness.cli import main
from harness.contract.schemas import validate_file
from harness.errors import InvalidInput
from harness.manifest import PREDICATE_TYPE, STATEMENT_TYPE, sign_run
from harness.manifest.dsse import PAYLOAD_TYPE, pae
from harness.manifest.keys import default_private_key_path, load_public_key


def test_round_trip_is_valid(signed_run, capsys):
    # The key this machine created is in its local trust policy: intact and trusted.
    assert audit(signed_run) == 0
    out = capsys.readouterr().out
    assert f"{signed_run.manifest}: VALID\n" in out
    assert "1 manifest: 1 VALID, 0 INVALID" in out
    # images are shown: the container by digest, the native role by package-list digest
    assert f"vllm/vllm-openai:v0.11.0@{IMAGE_DIGEST}" in out
    assert "INF-CPU: native python" in out


def test_default_location_and_subjects(signed_run):
    assert signed_run.manifest == signed_run.root / "manifests" / "INF-PREFIX-CACHE" / f"{RUN_ID}.intoto.json"
    envelope = json.loads(signed_run.manifest.read_text())
    assert envelope["payloadType"] == PAYLOAD_TYPE
    statement = read_statement(signed_run.manifest)
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == PREDICATE_TYPE
    files = sorted(p for p in signed_run.run_dir.rglob("*") if p.is_file())
    assert [s["name"] for s in statement["subject"]] == sorted(signed_run.rel(p) for p in files)
    for subject in statement["subject"]:
        data = (signed_run.root / subject["name"]).read_bytes()
        assert subject["digest"] == {"sha256": hashlib.sha256(data).hexdigest()}


def test_predicate_carries_the_run_and_validates(signed_run, tmp_path):
    predicate = read_statement(signed_run.manifest)["predicate"]
    run = json.loads((signed_run.run_dir / "run.json").read_text())
    for field in ("semantic_id", "run_id", "run_label", "workload_ids", "command", "requested", "effective",
                  "images", "model", "tokenizer", "started_utc", "ended_utc", "evidence_level", "decision"):
        assert predicate[field] == run[field], field
    assert predicate["harness"] == {"version": "0.1.0", "git_commit": GIT_COMMIT, "git_dirty": True}
    assert predicate["fingerprint"]["path"] == signed_run.rel(signed_run.run_dir / "fingerprint.json")
    # the predicate is an infkit document of its own: `infkit validate` knows it
    out = tmp_path / "predicate.json"
    out.write_text(json.dumps(predicate))
    assert validate_file(out) == []


def test_signature_is_ed25519_over_the_pae_with_the_published_key(signed_run):
    envelope = json.loads(signed_run.manifest.read_text())
    (signature,) = envelope["signatures"]
    public_path = signed_run.root / "manifests" / "keys" / f"{signature['keyid']}.pub.pem"
    public = load_public_key(public_path)
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert signature["keyid"] == hashlib.sha256(der).hexdigest()
    payload = base64.b64decode(envelope["payload"])
    public.verify(base64.b64decode(signature["sig"]), pae(PAYLOAD_TYPE, payload))
    assert pae("t", b"ab") == b"DSSEv1 1 t 2 ab"


def test_private_key_stays_out_of_the_repository(signed_run, key_home):
    key_path = default_private_key_path()
    assert key_path.is_relative_to(key_home)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    private = serialization.load_pem_private_key(key_path.read_bytes(), None)
    raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    secrets = [key_path.read_bytes().strip(), raw, base64.b64encode(raw), raw.hex().encode()]
    for path in signed_run.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(s in data for s in secrets), path


def test_fingerprint_is_collected_when_absent(tmp_path):
    run = make_run(tmp_path)
    (run.run_dir / "fingerprint.json").unlink()
    manifest = sign_run(run.run_dir, root=run.root)
    assert validate_file(run.run_dir / "fingerprint.json") == []
    names = [s["name"] for s in read_statement(manifest)["subject"]]
    assert run.rel(run.run_dir / "fingerprint.json") in names
    assert audit(run, manifest=manifest) == 0


def test_failed_run_is_a_valid_record(tmp_path, capsys):
    run = make_run(tmp_path, decision="blocked", results=("serving-failed-blocked.json",), status="failed")
    run.manifest = sign_run(run.run_dir, root=run.root)
    rc, doc = audit_json(run, capsys)
    assert rc == 0 and doc["valid"], doc
    assert doc["manifests"][0]["run"]["decision"] == "blocked"


def test_paired_adopt_run_is_valid(tmp_path):
    run = make_run(tmp_path, decision="adopt", evidence_level="paired",
                   results=("serving-single.json", "comparison-paired-adopt.json"))
    assert audit(run, manifest=sign_run(run.run_dir, root=run.root)) == 0


def test_manifest_inside_the_run_dir_does_not_list_itself(tmp_path):
    run = make_run(tmp_path)
    manifest = sign_run(run.run_dir, root=run.root, out=run.run_dir / "run.intoto.json")
    assert run.rel(manifest) not in [s["name"] for s in read_statement(manifest)["subject"]]
    assert audit(run, manifest=manifest) == 0


def test_sign_with_key_from_path_and_from_environment(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path / "repo")
    assert main(["keys", "init", "--root", str(run.root)]) == 0
    default = default_private_key_path()
    ci_key = tmp_path / "ci.pem"
    ci_key.write_bytes(default.read_bytes())
    ci_key.chmod(0o600)
    default.unlink()
    manifest = sign_run(run.run_dir, root=run.root, key_path=ci_key)
    assert not default.exists()  # an explicit key never creates the default one
    assert audit(run, manifest=manifest) == 0
    monkeypatch.setenv("INFKIT_SIGNING_KEY_PEM", ci_key.read_text())
    manifest = sign_run(run.run_dir, root=run.root, out=tmp_path / "env.intoto.json")
    assert audit(run, manifest=manifest) == 0 and not default.exists()
    with pytest.raises(InvalidInput, match="no such file"):
        sign_run(run.run_dir, root=run.root, key_path=tmp_path / "missing.pem")


def test_keys_init_refuses_to_overwrite_without_force(tmp_path, capsys):
    assert main(["keys", "init", "--root", str(tmp_path)]) == 0
    first = default_private_key_path().read_bytes()
    assert main(["keys", "init", "--root", str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["keys", "init", "--force", "--root", str(tmp_path)]) == 0
    assert default_private_key_path().read_bytes() != first
    assert len(list((tmp_path / "manifests" / "keys").glob("*.pub.pem"))) == 2


def test_keys_show_without_a_key_says_what_to_do(tmp_path, capsys):
    assert main(["keys", "show", "--root", str(tmp_path)]) == 1
    assert "infkit keys init" in capsys.readouterr().err


def test_run_dir_outside_root_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "elsewhere")
    (tmp_path / "repo").mkdir()
    assert main(["sign", str(run.run_dir), "--root", str(tmp_path / "repo")]) == 1
    err = capsys.readouterr().err
    assert "not inside the root" in err and "Traceback" not in err


def test_symlink_out_of_the_root_is_refused_at_signing(tmp_path):
    run = make_run(tmp_path / "repo")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", run.run_dir / "link.txt")
    with pytest.raises(InvalidInput, match="outside the root"):
        sign_run(run.run_dir, root=run.root)


def test_sign_cli_prints_the_manifest_path(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["sign", os.path.relpath(run.run_dir, tmp_path)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(f"manifests/INF-PREFIX-CACHE/{RUN_ID}.intoto.json")
    assert main(["audit", "manifests"]) == 0


def test_gpu_fingerprint_is_in_the_predicate_and_the_audit(tmp_path, capsys):
    run = make_run(tmp_path)
    fp_path = run.run_dir / "fingerprint.json"
    fp = json.loads(fp_path.read_text())
    fp["nvml"] = {"driver_version": "570.124.06", "cuda_driver_version": "12.8", "nvml_version": "12.570.124.06"}
    fp["gpus"] = [{
        "index": 0, "name": "NVIDIA H200", "uuid_sha256": "e" * 64, "serial_sha256": None, "vbios_version": "96.00",
        "pci_bus_id": "00000000:18:00.0", "memory_total_bytes": 150_000_000_000, "ecc_mode": "enabled",
        "persistence_mode": "enabled", "mig_mode": "disabled", "power_limit_w": 700.0,
        "clocks_mhz": {"graphics": 1980, "sm": 1980, "memory": 3201},
        "max_clocks_mhz": {"graphics": 1980, "sm": 1980, "memory": 3201},
        "compute_capability": "9.0", "clock_event_reasons": [],
    }]
    fp["gpus_absent_reason"] = None
    fp_path.write_text(json.dumps(fp))
    assert validate_file(fp_path) == []
    run.manifest = sign_run(run.run_dir, root=run.root)
    predicate = read_statement(run.manifest)["predicate"]["fingerprint"]
    assert predicate["driver_version"] == "570.124.06"
    assert predicate["gpus"][0]["name"] == "NVIDIA H200" and predicate["gpus"][0]["compute_capability"] == "9.0"
    assert audit(run) == 0
    assert "gpu      NVIDIA H200; driver 570.124.06, CUDA driver 12.8" in capsys.readouterr().out
