"""Shared fixtures and marker policy.

``slow``, ``docker`` and ``gpu`` tests skip cleanly when their service or
device is missing, except where the environment says it is required
(``INFKIT_REQUIRE_SLOW=1`` / ``INFKIT_REQUIRE_DOCKER=1`` in CI), where a
missing prerequisite fails instead of hiding behind a skip.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# `make test VAR=…` exports its own command-line variables to every make a test starts; those tests
# state the variables they mean, so the outer make's are dropped.
for _name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
    os.environ.pop(_name, None)


def require_or_skip(env_var: str, reason: str) -> None:
    """Skip with ``reason``, or fail when ``env_var`` says the prerequisite is required."""
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{reason} (required because {env_var}=1)")
    pytest.skip(reason)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A small real BPE tokenizer (no download), made once per session."""
    from tests.tiny_tokenizer import session_tokenizer

    return session_tokenizer(tmp_path_factory)


@pytest.fixture(scope="session")
def small_bench69(tmp_path_factory):
    """One small real bench-69 run (a server start per configuration) shared by every test that reads one."""
    from tests.bench_runs import BENCH69_SMALL, run_bench
    from tests.vllm_cpu_model import prepared_model_or_skip

    prepared_model_or_skip()
    return run_bench(tmp_path_factory.mktemp("bench69-small"), "69", "INF-PREFIX-CACHE", *BENCH69_SMALL)


@pytest.fixture(scope="session")
def api():
    """A Docker-API client (podman's service in CI), or a skip naming what is missing."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        require_or_skip("INFKIT_REQUIRE_DOCKER", f"no Docker-API engine reachable ({exc}); source .ci/setup-docker.sh")
    return client


@pytest.fixture(scope="session")
def local_base(api) -> str:
    base = os.environ.get("INFKIT_LOCAL_BASE_IMAGE")
    if not base:
        require_or_skip("INFKIT_REQUIRE_DOCKER", "INFKIT_LOCAL_BASE_IMAGE is not set; source .ci/setup-docker.sh")
    return base


def build_role(api, local_base: str, role: str, timeout_s: float):
    """`make images ROLE=<role>` on the local base, as docs/images.md says; returns the SDK image."""
    from harness.images.locks import load_lock

    proc = subprocess.run(["make", "-C", str(REPO_ROOT), "images", f"ROLE={role}", f"BASE_IMAGE={local_base}"],
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lock = load_lock(role)
    assert f"base substituted for {lock.base_image}" in proc.stdout
    return api.images.get(lock.local_ref)


@pytest.fixture(scope="session")
def inf_cpu(api, local_base):
    return build_role(api, local_base, "inf-cpu", 1200)


@pytest.fixture(scope="session")
def inf_vllm_cpu(api, local_base):
    """The serving role: its wheels come from the host's pip (a hash-checked wheelhouse)."""
    return build_role(api, local_base, "inf-vllm-cpu", 3000)


def pytest_collection_modifyitems(config, items):
    """The serverless slow tests first (the serving image build, the GPU bundle rehearsal: minutes each), so in
    ``make test``'s parallel part they start at once and the workers finish together instead of one of them
    running a long test alone at the end. The sort is stable: everything else keeps its order."""
    items.sort(key=lambda item: item.get_closest_marker("serverless") is None)
