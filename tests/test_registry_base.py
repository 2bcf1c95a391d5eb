"""`make lock-base` against a real registry: the local Debian base pushed under its upstream name.

The test registry stands in for Docker Hub as a mirror (``--registry HOST/NAMESPACE``): the base
is pushed to ``HOST/NAMESPACE/library/debian:bookworm-slim``. The Dockerfile's pin (the public
Debian digest) differs from what that registry holds, which is exactly the refusal case; a kit
that took a digest from the local store, or trusted the pin, would not refuse.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.images.locks import load_lock, lock_problems
from tests.registry_helpers import copy_checkout, head_digest, infkit, namespace, registry_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def mirror(local_base) -> tuple[str, str]:
    """(mirror prefix, the digest the registry holds for the base's upstream name)."""
    prefix = namespace(registry_or_skip())
    target = f"{prefix}/library/debian:bookworm-slim"
    subprocess.run(["podman", "push", local_base, target], capture_output=True, text=True, timeout=600, check=True)
    return prefix, head_digest(target)


def _checkout(tmp_path: Path) -> tuple[dict[str, str], Path]:
    root = tmp_path / "checkout"
    return {"INFKIT_IMAGE_LOCKS": str(copy_checkout(root))}, root


def test_lock_base_refuses_a_registry_digest_that_differs_from_the_pin(mirror, tmp_path: Path):
    prefix, digest = mirror
    env, root = _checkout(tmp_path)
    files = [root / "images/inf-cpu.lock.json", root / "docker/inf-cpu/Dockerfile"]
    before = [f.read_bytes() for f in files]
    pinned = load_lock("inf-cpu", root / "images").doc["base"]["digest"]
    assert pinned != digest
    run = infkit(["images", "lock-base", "inf-cpu", "--registry", prefix], env)
    assert run.returncode != 0
    (line,) = run.stderr.strip().splitlines()
    assert digest in line and pinned in line and "REPIN=1" in line
    assert [f.read_bytes() for f in files] == before  # nothing written


def test_lock_base_pins_and_verifies_what_the_registry_holds(mirror, tmp_path: Path):
    prefix, digest = mirror
    env, root = _checkout(tmp_path)
    run = infkit(["images", "lock-base", "inf-cpu", "--registry", prefix, "--repin"], env)
    assert run.returncode == 0, run.stderr
    lock = load_lock("inf-cpu", root / "images")
    base = lock.doc["base"]
    assert base["digest"] == digest and base["digest_verified"] is True
    assert prefix.split("/")[0] in base["digest_source"]
    assert "docker.io/library/debian:bookworm-slim" in base["digest_source"]
    assert f"ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim@{digest}" in lock.dockerfile.read_text()
    assert lock_problems(lock, root) == []
    again = infkit(["images", "lock-base", "inf-cpu", "--registry", prefix], env)  # now they agree: no REPIN needed
    assert again.returncode == 0, again.stderr


def test_lock_base_on_a_registry_without_the_tag_is_one_line(mirror, tmp_path: Path):
    env, root = _checkout(tmp_path)
    run = infkit(["images", "lock-base", "inf-cpu", "--registry", f"{mirror[0]}/absent"], env)
    assert run.returncode != 0
    assert len(run.stderr.strip().splitlines()) == 1 and "no such manifest" in run.stderr
    assert load_lock("inf-cpu", root / "images").doc["base"]["digest_verified"] is False
