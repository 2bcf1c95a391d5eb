"""Shared fixtures and marker policy.

``slow``, ``docker`` and ``gpu`` tests skip cleanly when their service or
device is missing, except where the environment says it is required
(``INFKIT_REQUIRE_SLOW=1`` / ``INFKIT_REQUIRE_DOCKER=1`` in CI), where a
missing prerequisite fails instead of hiding behind a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def require_or_skip(env_var: str, reason: str) -> None:
    """Skip with ``reason``, or fail when ``env_var`` says the prerequisite is required."""
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{reason} (required because {env_var}=1)")
    pytest.skip(reason)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def small_bench69(tmp_path_factory):
    """One small real bench-69 run (a server start per configuration) shared by every test that reads one."""
    from tests.bench_runs import BENCH69_SMALL, run_bench
    from tests.vllm_cpu_model import prepared_model_or_skip

    prepared_model_or_skip()
    return run_bench(tmp_path_factory.mktemp("bench69-small"), "69", "INF-PREFIX-CACHE", *BENCH69_SMALL)
