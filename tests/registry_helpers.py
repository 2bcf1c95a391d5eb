"""What the registry tests share: the registry under test, a copied checkout, fresh podman stores, tiny images.

The registry is the one ``.ci/setup-registry.sh`` starts (``INFKIT_TEST_REGISTRY``, plain HTTP on
loopback, marked insecure in ``CONTAINERS_REGISTRIES_CONF``). Tests skip without it and fail
instead when ``INFKIT_REQUIRE_REGISTRY=1`` (CI). Everything a test writes into the registry lives
under a namespace of its own, so a reused registry never mixes runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import uuid
from pathlib import Path

from harness.images import registry
from harness.images.locks import REPO_ROOT
from tests.conftest import require_or_skip

ACCEPT = ", ".join(registry.MANIFEST_TYPES)


def registry_or_skip() -> str:
    host = os.environ.get("INFKIT_TEST_REGISTRY")
    if not host:
        require_or_skip("INFKIT_REQUIRE_REGISTRY", "INFKIT_TEST_REGISTRY is not set; source .ci/setup-registry.sh")
    try:
        urllib.request.urlopen(f"http://{host}/v2/", timeout=10).close()
    except OSError as exc:
        require_or_skip("INFKIT_REQUIRE_REGISTRY", f"no registry answers at http://{host}/v2/ ({exc})")
    if host not in registry.insecure_registries():
        require_or_skip("INFKIT_REQUIRE_REGISTRY", f"{host} is not marked insecure in CONTAINERS_REGISTRIES_CONF")
    return host


def namespace(host: str) -> str:
    return f"{host}/t{uuid.uuid4().hex[:10]}"


def head_digest(ref: str) -> str:
    """The registry's Docker-Content-Digest for ``ref`` (host/repo:tag), asked without the kit's client."""
    name, _, tag = ref.rpartition(":")
    host, _, repo = name.partition("/")
    req = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{tag}", method="HEAD", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.headers["Docker-Content-Digest"]


def copy_checkout(root: Path, role: str = "inf-cpu") -> Path:
    """The locks, the role's Dockerfile and its dependency lock under ``root`` (what a lock's paths name)."""
    shutil.copytree(REPO_ROOT / "images", root / "images", ignore=shutil.ignore_patterns("provenance"))
    shutil.copytree(REPO_ROOT / "docker" / role, root / "docker" / role)
    (root / "requirements").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "requirements" / f"{role}.lock", root / "requirements")
    return root / "images"


def fresh_store(folder: Path) -> dict[str, str]:
    """The environment of an empty podman image store under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder}/storage"\nrunroot = "{folder}/run"\n')
    return {"CONTAINERS_STORAGE_CONF": str(conf)}


def drop_store(env: dict[str, str]) -> None:
    """Empty a fresh store and unmount what podman's overlay driver mounted under it (so tmp dirs can go)."""
    for argv in (["podman", "rm", "--all", "--force"], ["podman", "rmi", "--all", "--force"]):
        subprocess.run(argv, env=os.environ | env, capture_output=True, timeout=300)
    folder = str(Path(env["CONTAINERS_STORAGE_CONF"]).parent)
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(folder + "/")), reverse=True):
        subprocess.run(["umount", mount], capture_output=True, timeout=60)


def store_images(env: dict[str, str]) -> list[dict]:
    out = subprocess.run(["podman", "images", "--all", "--format", "json"], env=os.environ | env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out or "[]")


def tiny_image(tmp: Path, ref: str, role: str = "inf-cpu") -> str:
    """Import a one-layer image with unique content labelled as ``role`` and push it to ``ref``; its digest."""
    tmp.mkdir(parents=True, exist_ok=True)
    payload = tmp / "payload"
    payload.write_bytes(os.urandom(4096))
    archive = tmp / "layer.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="payload")
    local = f"localhost/infkit-test/tiny-{uuid.uuid4().hex[:8]}:t"
    subprocess.run(["podman", "import", "--change", f"LABEL io.infkit.role={role}", str(archive), local],
                   capture_output=True, text=True, timeout=120, check=True)
    try:
        subprocess.run(["podman", "push", local, ref], capture_output=True, text=True, timeout=300, check=True)
    finally:
        subprocess.run(["podman", "rmi", "--force", local], capture_output=True, timeout=120)
    return head_digest(ref)


def blob_file(digest: str) -> Path:
    """Where the registry's filesystem driver keeps ``digest``'s bytes."""
    storage = os.environ.get("INFKIT_REGISTRY_STORAGE")
    if not storage:
        require_or_skip("INFKIT_REQUIRE_REGISTRY", "INFKIT_REGISTRY_STORAGE is not set; source .ci/setup-registry.sh")
    hexd = digest.removeprefix("sha256:")
    return Path(storage) / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def infkit(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m harness ARGV`` as a user runs it (own process: one-line errors and exit codes)."""
    return subprocess.run([sys.executable, "-m", "harness", *argv],
                          env=os.environ | {"PYTHONPATH": str(REPO_ROOT)} | env,
                          cwd=cwd, capture_output=True, text=True, timeout=900)


def make(args: list[str], env: dict[str, str], root: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """``make -C ROOT ARGS`` as the CI user types it. A copied checkout gets the Makefile and uses this
    checkout's venv (and harness), so its runs and manifests are written under ROOT."""
    if root != REPO_ROOT and not (root / "Makefile").exists():
        for name in ("Makefile", "pyproject.toml"):  # copy2 keeps the mtime the venv's stamp is compared with
            shutil.copy2(REPO_ROOT / name, root)
        shutil.copytree(REPO_ROOT / "mk", root / "mk")
    venv = [] if root == REPO_ROOT else [f"VENV={REPO_ROOT / '.venv'}"]
    return subprocess.run(["make", "-C", str(root), *venv, *args], env=os.environ | env, capture_output=True,
                          text=True, timeout=900)
