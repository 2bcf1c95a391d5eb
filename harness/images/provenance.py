"""Signed build provenance for a pushed role image: an in-toto Statement, SLSA provenance v1.

A build records its inputs in the image's own labels (``build_input_labels``): the build
arguments, the Dockerfile's and the dependency lock's sha256, the wheelhouse's digest. After a
push the statement is made from the config **the registry serves** for the pushed digest, so
it describes what was pushed, not what a local store claims. It is signed with the kit's key
(the one runs are signed with, ``harness.manifest.keys``) and stored beside the locks as
``images/provenance/<role>/<digest hex>.intoto.json``; ``infkit audit`` verifies it for every
image a run used, under the auditor's trust policy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_json
from harness.ids import canonical_json, sha256_file
from harness.images.locks import ImageLock

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/infkit/infkit/blob/main/docs/images.md#signed-provenance"
BUILDER_ID = "https://github.com/infkit/infkit/harness/images/build.py"
PROVENANCE_DIR = "provenance"
SUFFIX = ".intoto.json"
LABEL_ARGS = "io.infkit.build-args"
LABEL_DOCKERFILE = "io.infkit.dockerfile.sha256"
LABEL_DEPLOCK = "io.infkit.dependency-lock.sha256"
LABEL_WHEELHOUSE = "io.infkit.wheelhouse.sha256"


def wheelhouse_digest(folder: Path) -> str:
    """sha256 over the sorted ``<wheel sha256>  <file name>`` lines of a wheelhouse."""
    lines = sorted(f"{sha256_file(p)}  {p.name}\n" for p in folder.glob("*.whl"))
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def build_input_labels(lock: ImageLock, args: dict[str, str], wheelhouse: Path | None) -> dict[str, str]:
    """The labels a build adds so the pushed image names its own inputs."""
    return {
        LABEL_ARGS: canonical_json(args).decode(),
        LABEL_DOCKERFILE: sha256_file(lock.dockerfile),
        LABEL_DEPLOCK: sha256_file(lock.root / lock.doc["dependency_lock"]["path"]),
        LABEL_WHEELHOUSE: wheelhouse_digest(wheelhouse) if wheelhouse else "",
    }


def provenance_path(lock_dir: Path, role: str, digest: str) -> Path:
    return lock_dir / PROVENANCE_DIR / role / f"{digest.removeprefix('sha256:')}{SUFFIX}"


def _hex(digest: str) -> dict[str, str]:
    return {"sha256": digest.removeprefix("sha256:")}


def _dependencies(lock: ImageLock, labels: dict[str, str], source: str, revision: str) -> list[dict[str, Any]]:
    at = f"git+{source}@{revision.removesuffix('-dirty')}"
    deps = [{"name": "source", "uri": f"git+{source}", "digest": {"gitCommit": revision.removesuffix("-dirty")},
             "annotations": {"dirty": revision.endswith("-dirty")}}]
    if labels.get(LABEL_DOCKERFILE):
        deps.append({"name": "dockerfile", "uri": f"{at}#{lock.doc['dockerfile']}",
                     "digest": _hex(labels[LABEL_DOCKERFILE])})
    base_digest = labels.get("org.opencontainers.image.base.digest")
    if base_digest:
        base = {"name": "base", "uri": f"oci://{labels.get('org.opencontainers.image.base.name', '')}",
                "digest": _hex(base_digest)}
        if labels.get("io.infkit.base.substituted-for"):
            base["annotations"] = {"substitutedFor": labels["io.infkit.base.substituted-for"]}
        deps.append(base)
    if labels.get(LABEL_DEPLOCK):
        deps.append({"name": "dependency-lock", "uri": f"{at}#{lock.doc['dependency_lock']['path']}",
                     "digest": _hex(labels[LABEL_DEPLOCK])})
    if labels.get(LABEL_WHEELHOUSE):
        deps.append({"name": "wheelhouse", "digest": _hex(labels[LABEL_WHEELHOUSE])})
    return deps


def _run_metadata(labels: dict[str, str], config: dict[str, Any], pushed_utc: str) -> dict[str, str]:
    """SLSA v1 ``runDetails.metadata``: ``startedOn`` only when the image records its creation time (a
    typed SLSA consumer rejects ``null`` for a timestamp, so an unknown time is left out, not written)."""
    started = labels.get("org.opencontainers.image.created") or config.get("created")
    return {**({"startedOn": started} if started else {}), "finishedOn": pushed_utc}


def statement(lock: ImageLock, registry_ref: str, digest: str, config: dict[str, Any],
              pushed_utc: str) -> dict[str, Any]:
    """The in-toto Statement for ``registry_ref@digest``, from the image config the registry served."""
    labels = (config.get("config") or {}).get("Labels") or {}
    args = json.loads(labels[LABEL_ARGS]) if labels.get(LABEL_ARGS) else {}
    revision = labels.get("org.opencontainers.image.revision") or args.get("REVISION") or "unknown"
    source = labels.get("org.opencontainers.image.source") or args.get("SOURCE") or ""
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"role": lock.role, "dockerfile": lock.doc["dockerfile"], "buildArgs": args},
            "internalParameters": {"wheelhouse": bool(labels.get(LABEL_WHEELHOUSE))},
            "resolvedDependencies": _dependencies(lock, labels, source, revision),
        },
        "runDetails": {"builder": {"id": BUILDER_ID}, "metadata": _run_metadata(labels, config, pushed_utc)},
    }
    return {"_type": STATEMENT_TYPE, "subject": [{"name": registry_ref, "digest": _hex(digest)}],
            "predicateType": SLSA_PREDICATE, "predicate": predicate}


def write_signed(lock: ImageLock, registry_ref: str, digest: str, config: dict[str, Any], pushed_utc: str,
                 keys_dir: Path, key_path: Path | None = None) -> Path:
    """Sign the statement with the kit's key, publish the public key, write it beside the lock."""
    from harness.manifest.dsse import sign_payload
    from harness.manifest.keys import load_signing_key, publish_public_key

    key = load_signing_key(key_path)
    body = canonical_json(statement(lock, registry_ref, digest, config, pushed_utc))
    envelope = sign_payload(body, key)
    publish_public_key(key.public_key, keys_dir)
    return atomic_write_json(provenance_path(lock.path.parent, lock.role, digest), envelope)
