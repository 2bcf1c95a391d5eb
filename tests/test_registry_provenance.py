"""The audit's image-provenance check without a registry: a statement signed as `make push` signs it.

The statement is made from an image config of the shape a registry serves; the audit side
finds it by digest and verifies signature, trust policy and subject.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.ids import canonical_json
from harness.images.locks import load_lock
from harness.images.provenance import (
    LABEL_ARGS,
    LABEL_DEPLOCK,
    LABEL_DOCKERFILE,
    LABEL_WHEELHOUSE,
    statement,
    write_signed,
)
from harness.manifest.audit import _signature_findings
from harness.manifest.image_provenance import image_provenance
from harness.manifest.keys import init_key
from harness.manifest.trust import TrustPolicy, load_trusted_keys

DIGEST = "sha256:" + "ab" * 32
REF = "127.0.0.1:5000/infkit/inf-cpu"
CONFIG = {"created": "2026-12-01T10:00:00Z", "config": {"Labels": {
    LABEL_ARGS: canonical_json({"BASE_IMAGE": "localhost/base:1", "REVISION": "c0ffee" * 6 + "abcd"}).decode(),
    LABEL_DOCKERFILE: "sha256:" + "1" * 64, LABEL_DEPLOCK: "sha256:" + "2" * 64, LABEL_WHEELHOUSE: "",
    "org.opencontainers.image.revision": "c0ffee" * 6 + "abcd-dirty",
    "org.opencontainers.image.base.name": "localhost/base:1",
    "org.opencontainers.image.base.digest": "sha256:" + "3" * 64,
    "io.infkit.base.substituted-for": "docker.io/library/debian:bookworm-slim@sha256:" + "4" * 64,
}}}


@pytest.fixture
def signed(tmp_path: Path):
    """(root, key id): a provenance for REF@DIGEST under root/images/provenance, signed by a fresh key."""
    key = init_key(tmp_path / "key.pem")
    lock = load_lock("inf-cpu")
    placed = type(lock)(lock.role, tmp_path / "images" / lock.path.name, lock.doc)
    write_signed(placed, REF, DIGEST, CONFIG, "2026-12-01T10:05:00Z", tmp_path / "manifests" / "keys",
                 tmp_path / "key.pem")
    return tmp_path, key.keyid


def _check(root: Path, image: dict, policy: set[str] | None = None):
    trust = TrustPolicy(root / "trust.json", {k: None for k in policy}) if policy is not None else None
    keys = load_trusted_keys((), root / "manifests" / "keys", trust)
    return image_provenance([image], root, keys, _signature_findings)


def _image(digest: str = DIGEST, source: str = "registry", ref: str = REF) -> dict:
    return {"role": "INF-CPU", "ref": ref, "digest": digest, "base_substituted": None, "source": source}


def test_a_trusted_provenance_is_summarised(signed):
    root, keyid = signed
    findings, (line,) = _check(root, _image(), {keyid})
    assert findings == []
    assert line.startswith(f"INF-CPU: signed by key {keyid[:16]}")
    assert "dockerfile sha256:111111111111" in line and "base sha256:333333333333" in line
    assert "dependency-lock sha256:222222222222" in line and "revision c0ffeec0ffee" in line
    assert "wheelhouse" not in line


def test_a_signer_the_policy_does_not_list_is_invalid(signed):
    root, _ = signed
    findings, _ = _check(root, _image(), {"f" * 64})
    assert [f.check for f in findings] == ["provenance"] and "does not list" in findings[0].message


def test_a_provenance_for_another_ref_is_invalid(signed):
    root, keyid = signed
    findings, _ = _check(root, _image(ref="127.0.0.1:5000/infkit/other"), {keyid})
    assert findings and "its subject is" in findings[0].message


def test_images_without_provenance_say_so(signed):
    root, keyid = signed
    assert _check(root, _image(digest="sha256:" + "cd" * 32), {keyid}) == ([], ["INF-CPU: no provenance"])
    assert _check(root, _image(source="local build"), {keyid}) == ([], ["INF-CPU: no provenance (a local build)"])
    native = {"role": "INF-CPU", "native": True, "packages_sha256": DIGEST}
    assert image_provenance([native], root, load_trusted_keys((), root / "manifests/keys", None), _signature_findings) \
        == ([], [])


def test_an_image_without_a_creation_time_has_no_started_on():
    """SLSA v1 types startedOn as a timestamp: unknown, the key is left out (a typed parser rejects null)."""
    lock = load_lock("inf-cpu")
    labels = dict(CONFIG["config"]["Labels"])
    unknown = statement(lock, REF, DIGEST, {"config": {"Labels": labels}}, "2026-12-01T10:05:00Z")
    assert unknown["predicate"]["runDetails"]["metadata"] == {"finishedOn": "2026-12-01T10:05:00Z"}
    known = statement(lock, REF, DIGEST, CONFIG, "2026-12-01T10:05:00Z")
    assert known["predicate"]["runDetails"]["metadata"] == {"startedOn": "2026-12-01T10:00:00Z",
                                                            "finishedOn": "2026-12-01T10:05:00Z"}
    labelled = {"config": {"Labels": {**labels, "org.opencontainers.image.created": "2026-12-01T09:00:00Z"}}}
    assert statement(lock, REF, DIGEST, labelled, "x")["predicate"]["runDetails"]["metadata"]["startedOn"] == (
        "2026-12-01T09:00:00Z")
