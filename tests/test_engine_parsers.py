"""Every GPU launch the kit plans is accepted by the pinned engine's own parser — and what the kit refuses, the
engine refuses too. No GPU: the engines' Python sources (vLLM 0.11.0, SGLang 0.5.5) run on the serving venv's
packages (``.ci/setup-engines.sh`` prepares them and exports the paths below)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.bench import get_bench
from harness.bench.dryrun import dry_run
from harness.runtime import base as runtime_base
from tests.conftest import require_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.serverless]
HERE = Path(__file__).resolve().parent
ENGINE_PATHS = {"vllm": "INFKIT_VLLM_011_PATH", "sglang": "INFKIT_SGLANG_055_PATH"}
# Each bench x form the docs say runs on the pinned GPU images (docs/bench-*.md, "On the pinned GPU images").
GPU_RUNS = [(b, {"gpu": g}) for b in ("66", "68", "69", "70", "72", "81") for g in ("0", "0,1")] + [
    (b, {"gpu": "0", "backend": "sglang"}) for b in ("69", "70", "72")] + [
    ("81", {"gpu": "0,1", "layouts": ("pp2", "tp2", "dp2", "dp2-replicas", "nodes-pp2", "ray-executor")}),
    ("70", {"gpu": "0", "order": "concurrent"})] + [
    ("69", {"gpu": "0", "backend": b, "enforce_eager": True}) for b in ("vllm", "sglang")]
# Refusals that rest on the command line alone: the engine's own code must refuse the same command.
ENGINE_LEVEL = ("--nnodes", "NotImplementedError", "SGLang 0.5.5", "SGLang takes", "SGLang names", "SGLang has no")


def engine_env() -> dict[str, str]:
    missing = [v for v in (*ENGINE_PATHS.values(), "INFKIT_ENGINE_PYTHON") if not os.environ.get(v)]
    if missing:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"{', '.join(missing)} unset: source .ci/setup-engines.sh")
    return dict(os.environ)


def planned_entries(monkeypatch) -> list[dict]:
    """Every server process of every GPU run above, as the dry run plans it on this machine (no GPU)."""
    from tests.vllm_cpu_model import prepared_model_or_skip

    prepared_model_or_skip()
    monkeypatch.setattr(runtime_base, "nvidia_gpu_present", lambda: False)
    # the sglang lock's base digest is a placeholder: its image is planned as a build on a local base
    monkeypatch.setenv("INFKIT_LOCAL_BASE_IMAGE", "localhost/infkit/debian-bookworm-minbase:local")
    monkeypatch.delenv("INFKIT_PULL_ONLY", raising=False)
    entries = []
    for bench, options in GPU_RUNS:
        spec = get_bench(bench)
        extra = {"proposal_manifest": "none"} if bench == "68" else {}
        doc = json.loads(json.dumps(dry_run(spec, spec.config(**options, **extra)), default=str))
        for server in doc["servers"]:
            refused = server["refused"] or ""
            if refused and not any(m in refused for m in ENGINE_LEVEL):
                continue  # devices or host processes: nothing the parser decides
            entries.append({"name": f"{bench} {json.dumps(options)} {server['name']}", "backend": server["backend"],
                            "argv": server["argv"], "refused": refused or None})
    return entries


def parse_with(engine: str, entries: list[dict], env: dict[str, str]) -> dict[str, dict]:
    env = {**env, "PYTHONPATH": env[ENGINE_PATHS[engine]], "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run([env["INFKIT_ENGINE_PYTHON"], str(HERE / "engine_parse.py"), engine],
                          input=json.dumps(entries), capture_output=True, text=True, env=env, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("INFKIT_ENGINE_PARSE ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {r["name"]: r for r in json.loads(line.split(" ", 1)[1])}


def test_the_pinned_engines_accept_every_planned_launch_and_refuse_what_the_kit_refuses(monkeypatch):
    env = engine_env()
    entries = planned_entries(monkeypatch)
    assert {e["backend"] for e in entries} == {"vllm", "sglang"}
    wrong = []
    for engine in ENGINE_PATHS:
        mine = [e for e in entries if e["backend"] == engine]
        verdicts = parse_with(engine, mine, env)
        for entry in mine:
            got = verdicts[entry["name"]]
            if entry["refused"] is None and not got["ok"]:
                wrong.append(f"{entry['name']}: the engine refuses a launch the kit would start: {got['error']}")
            if entry["refused"] is not None and got["ok"]:
                wrong.append(f"{entry['name']}: the kit refuses ({entry['refused'][:80]}) what the engine accepts")
    assert not wrong, "\n".join(wrong)
