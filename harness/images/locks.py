"""Image locks: ``images/<role>.lock.json`` (schemas/image-lock.schema.json).

A lock says what a role's image is built from (Dockerfile, digest-pinned base,
build args, hash-locked dependencies, CUDA floor) and where the built image
lives (registry ref, tag, digest once pushed). ``lock_problems`` also checks the
lock against the files it names, so a Dockerfile or dependency lock edited
without refreshing the image lock fails the tests.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_text
from harness.contract.schemas import load_document, validate_document
from harness.errors import CapabilityMissing, InvalidInput, SchemaViolation
from harness.ids import sha256_file
from harness.images import deplock
from harness.images.dockerfile import PLACEHOLDER_DIGEST, base_image_default, pin_problems

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK_DIR = REPO_ROOT / "images"
LOCAL_REGISTRY = "localhost/infkit"
# another folder of locks (a fork's, a test's); its parent holds the docker/ and requirements/ files they name
LOCK_DIR_ENV = "INFKIT_IMAGE_LOCKS"


@dataclass(frozen=True)
class CudaFloor:
    version: str
    min_driver: str


@dataclass(frozen=True)
class ServerDefaults:
    health_path: str
    port: int
    shm_bytes: int


@dataclass(frozen=True)
class ImageLock:
    role: str
    path: Path
    doc: dict[str, Any]

    @property
    def registry_ref(self) -> str:
        return self.doc["image"]["registry_ref"]

    @property
    def tag(self) -> str:
        return self.doc["image"]["tag"]

    @property
    def digest(self) -> str | None:
        return self.doc["image"]["digest"]

    @property
    def tag_ref(self) -> str:
        return f"{self.registry_ref}:{self.tag}"

    @property
    def local_ref(self) -> str:
        """Where ``make images`` tags a local build."""
        return f"{LOCAL_REGISTRY}/{self.role}:{self.tag}"

    @property
    def base_image(self) -> str:
        return self.doc["build_args"]["BASE_IMAGE"]

    @property
    def base_placeholder(self) -> bool:
        return self.doc["base"]["digest"] == PLACEHOLDER_DIGEST

    @property
    def root(self) -> Path:
        """The checkout the lock's relative paths (Dockerfile, dependency lock) are under."""
        return self.path.parent.parent

    @property
    def dockerfile(self) -> Path:
        return self.root / self.doc["dockerfile"]

    @property
    def cuda(self) -> CudaFloor | None:
        c = self.doc["cuda"]
        return CudaFloor(c["version"], c["min_driver"]) if c else None

    @property
    def server(self) -> ServerDefaults | None:
        s = self.doc["server"]
        return ServerDefaults(s["health_path"], s["port"], s["shm_bytes"]) if s else None

    def pull_ref(self) -> str:
        """``registry_ref@digest``; the only way a lock names an image to pull."""
        if not self.digest:
            raise CapabilityMissing(
                f"images/{self.role}.lock.json has no image digest yet (not built and pushed)",
                hint=f"build it locally with `make images ROLE={self.role}`, "
                f"or push it and run `make lock ROLE={self.role}`",
            )
        return f"{self.registry_ref}@{self.digest}"


def lock_dir() -> Path:
    """``$INFKIT_IMAGE_LOCKS`` when set, else the checkout's ``images/``."""
    return Path(os.environ.get(LOCK_DIR_ENV) or LOCK_DIR)


def roles(folder: Path | None = None) -> list[str]:
    return sorted(p.name.removesuffix(".lock.json") for p in (folder or lock_dir()).glob("*.lock.json"))


def load_lock(role: str, folder: Path | None = None) -> ImageLock:
    folder = folder or lock_dir()
    path = folder / f"{role}.lock.json"
    if not path.is_file():
        raise InvalidInput(f"unknown environment role {role!r}", hint=f"roles: {', '.join(roles(folder))}")
    doc = load_document(path)  # the strict reader: malformed, NaN, binary, ... are one-line errors
    problems = validate_document(doc)
    if problems:
        raise SchemaViolation(f"{path} does not satisfy its schema", [str(p) for p in problems])
    return ImageLock(role, path, doc)


def lock_problems(lock: ImageLock, root: Path | None = None) -> list[str]:
    """Disagreements between a (schema-valid) lock and the files it describes (under ``root``, else the lock's)."""
    root = root or lock.root
    out: list[str] = []
    doc = lock.doc
    if doc["role"] != lock.role:
        out.append(f"{lock.path.name}: role {doc['role']!r} does not match the file name")
    dockerfile = root / doc["dockerfile"]
    if not dockerfile.is_file():
        return out + [f"{lock.path.name}: {doc['dockerfile']} does not exist"]
    out += pin_problems(dockerfile)
    default = base_image_default(dockerfile)
    if default != lock.base_image:
        out.append(f"{lock.path.name}: build_args.BASE_IMAGE {lock.base_image} differs from the Dockerfile's {default}")
    name, _, digest = lock.base_image.rpartition("@")
    if (name, digest) != (doc["base"]["name"], doc["base"]["digest"]):
        out.append(f"{lock.path.name}: base name/digest do not match build_args.BASE_IMAGE")
    dep = doc["dependency_lock"]
    dep_path = root / dep["path"]
    if not dep_path.is_file():
        return out + [f"{lock.path.name}: {dep['path']} does not exist"]
    if sha256_file(dep_path) != dep["sha256"]:
        out.append(f"{lock.path.name}: {dep['path']} changed since the lock was written "
                   f"(run `make lock ROLE={lock.role}`)")
    count = len(deplock.parse_lock(dep_path.read_text()))
    if count != dep["distributions"]:
        out.append(f"{lock.path.name}: {dep['path']} has {count} distributions, the lock says {dep['distributions']}")
    if dep["path"] not in dockerfile.read_text():
        out.append(f"{lock.path.name}: {doc['dockerfile']} does not install {dep['path']}")
    return out


def write_lock(lock: ImageLock) -> Path:
    problems = validate_document(lock.doc)
    if problems:
        raise SchemaViolation(f"refusing to write an invalid {lock.path.name}", [str(p) for p in problems])
    return atomic_write_text(lock.path, json.dumps(lock.doc, indent=2) + "\n")


def _edited(lock: ImageLock, edit: Callable[[dict[str, Any]], None]) -> ImageLock:
    doc = copy.deepcopy(lock.doc)
    edit(doc)
    return ImageLock(lock.role, lock.path, doc)


def refreshed(lock: ImageLock, *, image_digest: str | None = None, built_utc: str | None = None,
              revision: str | None = None, root: Path | None = None, **pushed: str | None) -> ImageLock:
    """A copy of ``lock`` with the dependency-lock hash/count re-read and, when given, the pushed image digest
    (``pushed``: ``digest_source`` and ``provenance``, as the schema names them)."""
    dep_path = (root or lock.root) / lock.doc["dependency_lock"]["path"]

    def edit(doc: dict[str, Any]) -> None:
        doc["dependency_lock"]["sha256"] = sha256_file(dep_path)
        doc["dependency_lock"]["distributions"] = len(deplock.parse_lock(dep_path.read_text()))
        if image_digest is not None:
            doc["image"].update(digest=image_digest, built_utc=built_utc, revision=revision, **pushed)

    return _edited(lock, edit)


def with_base_digest(lock: ImageLock, digest: str, source: str) -> ImageLock:
    """A copy of ``lock`` whose base digest was resolved against the registry."""

    def edit(doc: dict[str, Any]) -> None:
        doc["base"].update(digest=digest, digest_verified=True, digest_source=source)
        doc["build_args"]["BASE_IMAGE"] = f"{doc['base']['name']}@{digest}"

    return _edited(lock, edit)


def with_registry_ref(lock: ImageLock, registry_ref: str) -> ImageLock:
    """A copy of ``lock`` naming another repository (a fork pushing to its own registry namespace)."""
    return _edited(lock, lambda doc: doc["image"].update(registry_ref=registry_ref))
