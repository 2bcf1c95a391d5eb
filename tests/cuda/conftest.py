"""Fixtures for the CUDA mechanism tests: torch (skip or fail per INFKIT_REQUIRE_TORCH), a CUDA device, a runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import require_or_skip


@pytest.fixture(scope="session")
def torch():
    try:
        import torch
    except ImportError:
        require_or_skip("INFKIT_REQUIRE_TORCH", "torch not installed (make setup-torch)")
    import transformers  # noqa: F401  (the torch extra brings both)

    return torch


@pytest.fixture
def cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


@pytest.fixture
def run_cuda(torch, tmp_path) -> Callable:
    """Run experiment ``name`` with config overrides into tmp_path (unsigned); return the RunOutput."""
    from harness.cuda.registry import get_experiment
    from harness.cuda.runner import run_experiment

    def run(name: str, device: str = "cpu", **config):
        exp = get_experiment(name)
        return run_experiment(exp, exp.config(**config), device=device, out_root=tmp_path / "runs", sign=False)

    return run


@pytest.fixture
def valid():
    """Assert that a written document satisfies its schema and the evidence rules."""
    from harness.contract import validate_file

    def check(path: Path) -> None:
        problems = validate_file(path)
        assert not problems, [str(p) for p in problems]

    return check


@pytest.fixture
def require():
    """``require(env_var, reason)``: skip, or fail when CI sets ``env_var=1``."""
    return require_or_skip
