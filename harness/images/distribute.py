"""Push, lock, pull and verify role images against a registry, by digest.

- ``push_image``: the engine pushes the local build to ``REGISTRY/<role>:<tag>``; the digest is
  then asked of the registry (and must match what podman says it uploaded); the signed
  provenance for that digest is written beside the lock.
- ``registry_lock``: the lock's digest, build time and revision come from the registry: the
  tag's ``Docker-Content-Digest`` and the labels of the config it serves.
- ``pull_verified``: ``registry_ref@digest`` only, never a tag. The registry must serve that
  manifest (bytes hashing to the digest) with every blob at its declared size; the engine then
  pulls by digest and must hold the image under that digest. Any refusal removes what the
  pull left behind and is one line.
- ``resolve_base``: a base tag resolved against its registry (or a mirror holding the upstream
  name); a digest that differs from the Dockerfile's pin is refused unless re-pinning is asked.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.contract.result import utc_now
from harness.errors import InfkitError, InvalidInput
from harness.images import registry
from harness.images.build import _run, detect_engine, image_id
from harness.images.dockerfile import PLACEHOLDER_DIGEST
from harness.images.locks import ImageLock, refreshed, with_base_digest, with_registry_ref
from harness.images.registry import Reference, RegistryRefusal

REGISTRY_PREFIX = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")
DATE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
PULL_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Pushed:
    ref: str  # registry_ref:tag
    digest: str
    provenance: Path


def check_registry(prefix: str) -> str:
    if not REGISTRY_PREFIX.match(prefix):
        raise InvalidInput(f"REGISTRY={prefix!r} is not host[:port][/namespace]",
                           hint="e.g. 127.0.0.1:5000/infkit or ghcr.io/OWNER")
    return prefix.rstrip("/")


def _labels(config: dict) -> dict[str, str]:
    return (config.get("config") or {}).get("Labels") or {}


def _check_role(lock: ImageLock, ref: Reference, config: dict) -> None:
    role = _labels(config).get("io.infkit.role")
    if role != lock.role:
        raise RegistryRefusal(f"{ref} is an image of role {role!r}, not {lock.role!r}")


def push_image(lock: ImageLock, prefix: str, engine: str | None = None, keys_dir: Path | None = None) -> Pushed:
    """Push the role's local build to ``prefix/<role>:<tag>`` and sign the provenance of the digest it got."""
    from harness.images.provenance import write_signed

    prefix = check_registry(prefix)
    engine = detect_engine(engine)
    if image_id(engine, lock.local_ref) is None:
        raise InvalidInput(f"{lock.local_ref} is not in the {engine} image store",
                           hint=f"build it with `make images ROLE={lock.role}`")
    target = Reference.parse(f"{prefix}/{lock.role}:{lock.tag}")
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        extra = ["--digestfile", str(digest_file)] if engine == "podman" else []
        _run([engine, "push", *extra, lock.local_ref, str(target)], PULL_TIMEOUT_S, f"{engine} push {target}")
        uploaded = digest_file.read_text().strip() if digest_file.is_file() else None
    digest = registry.tag_digest(target)
    if uploaded and uploaded != digest:
        raise RegistryRefusal(f"{engine} uploaded {uploaded}, but the registry holds {digest} under {target}")
    config = registry.image_config(Reference(target.host, target.repository, digest=digest))
    _check_role(lock, target, config)
    keys = keys_dir or lock.root / "manifests" / "keys"
    provenance = write_signed(lock, target.name, digest, config, utc_now(), keys)
    return Pushed(str(target), digest, provenance)


def registry_lock(lock: ImageLock, registry_ref: str | None = None, digest: str | None = None) -> ImageLock:
    """``lock`` with the digest the registry reports for its tag (or ``digest``, which the registry must serve)."""
    from harness.images.provenance import provenance_path

    if registry_ref:
        lock = with_registry_ref(lock, registry_ref)
    ref = Reference.parse(lock.tag_ref)
    if digest:
        registry.manifest(Reference(ref.host, ref.repository, digest=digest))
        source = f"{digest} served by {ref.host} for {ref.repository}, checked {utc_now()}"
    else:
        digest = registry.tag_digest(ref)
        source = f"Docker-Content-Digest of {ref} from {ref.host}, {utc_now()}"
    config = registry.image_config(Reference(ref.host, ref.repository, digest=digest))
    _check_role(lock, ref, config)
    labels = _labels(config)
    created = labels.get("org.opencontainers.image.created") or config.get("created") or ""
    provenance = provenance_path(lock.path.parent, lock.role, digest)
    return refreshed(lock, image_digest=digest, built_utc=created if DATE_TIME.match(created) else None,
                     revision=labels.get("org.opencontainers.image.revision"), digest_source=source,
                     provenance=str(provenance.relative_to(lock.root)) if provenance.is_file() else None)


def _image_digests(engine: str, ref: str) -> set[str] | None:
    proc = subprocess.run([engine, "image", "inspect", "--format", "{{json .RepoDigests}}", ref],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    return {d.partition("@")[2] for d in json.loads(proc.stdout or "[]") or []}


def _remove(engine: str, ref: str) -> None:
    subprocess.run([engine, "rmi", "--force", ref], capture_output=True, text=True, timeout=120)


def pull_verified(lock: ImageLock, engine: str | None = None) -> str:
    """Pull ``registry_ref@digest`` and check the engine holds exactly that manifest; returns the reference."""
    ref_text = lock.pull_ref()
    ref = Reference.parse(ref_text)
    if ref.digest != lock.digest or ref.tag:
        raise InfkitError(f"{ref_text}: refusing to pull anything but the locked digest")
    engine = detect_engine(engine)
    present = _image_digests(engine, ref_text) is not None  # a refusal removes only what this pull added
    try:
        found = registry.manifest(ref)
        if problems := registry.blob_problems(ref, found):
            raise RegistryRefusal(f"{ref_text}: {problems[0]}")
        _run([engine, "pull", ref_text], PULL_TIMEOUT_S, f"{engine} pull {ref_text}")
        held = _image_digests(engine, ref_text)
        if held is None or lock.digest not in held:
            raise RegistryRefusal(f"{ref_text}: after the pull the {engine} store has no image under the locked digest")
    except InfkitError as exc:
        if not present:
            _remove(engine, ref_text)
        raise InfkitError(f"refused to pull {lock.role}: {exc}") from None
    return ref_text


def resolve_base(lock: ImageLock, mirror: str | None = None, repin: bool = False) -> tuple[ImageLock, str]:
    """The lock with its base digest resolved against the registry (or ``mirror``), and where it was resolved."""
    upstream = Reference.parse(lock.doc["base"]["name"])
    where = upstream.on_mirror(check_registry(mirror)) if mirror else upstream
    digest = registry.tag_digest(where)
    pinned = lock.doc["base"]["digest"]
    if pinned not in (digest, PLACEHOLDER_DIGEST) and not repin:
        raise RegistryRefusal(f"{where} resolves to {digest}, but {lock.doc['dockerfile']} pins {pinned}",
                              hint="check which is right; REPIN=1 (--repin) pins the registry's digest")
    via = f" (a mirror holding {upstream})" if mirror else ""
    source = f"resolved against {where.host}{via}: Docker-Content-Digest of {where}, {utc_now()}"
    return with_base_digest(lock, digest, source), digest
