"""Fixtures for the manifest tests: a run directory under a root, a signing key outside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from manifest_helpers import Run, make_run

from harness.manifest import sign_run


@pytest.fixture(autouse=True)
def key_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own config dir (the private key lives there), never the user's."""
    home = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.delenv("INFKIT_TRUST_POLICY", raising=False)  # the local policy lives in this config dir
    return home


@pytest.fixture
def signed_run(tmp_path) -> Run:
    run = make_run(tmp_path / "repo")
    run.manifest = sign_run(run.run_dir, root=run.root)
    return run
