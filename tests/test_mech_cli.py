"""infkit mech NAME end to end: schema-valid result and run.json, summary, plots, determinism, one-line errors,
signing in-process (also through `make mech-budget`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract import validate_file
from harness.mech import get_mechanism, mechanisms
from harness.mech.batching import BatchingConfig
from harness.mech.output import write_mech_run
from tests.mech_workloads import write_workload_file

FAST_ARGS = {
    "lifecycle": [],
    "budget": ["--contexts", "1024", "4096", "--batches", "1", "8", "64"],
    "batching": ["--requests", "150"],
    "kvcache": ["--requests", "60", "--groups", "3", "--prefix-tokens", "256", "--input-mean", "320"],
    "specdec": ["--passes", "500", "--alphas", "0.7", "--gammas", "2", "4", "--calls", "3"],
    "calibrate": ["--heldout-requests", "20"],
}
PLOTS = {"budget": "budget.png", "batching": "batching.png", "kvcache": "kvcache.png", "specdec": "specdec.png",
         "lifecycle": "lifecycle.png", "calibrate": "calibrate.png"}


def test_every_mechanism_module_is_discovered() -> None:
    assert set(mechanisms()) == set(FAST_ARGS)


@pytest.mark.parametrize("name", sorted(FAST_ARGS))
def test_each_mechanism_writes_a_valid_run(name: str, tmp_path, capsys) -> None:
    assert main(["mech", name, "--out", str(tmp_path), "--run-id", "t1", "--no-sign", *FAST_ARGS[name]]) == 0
    run_dir = tmp_path / name / "t1"
    assert validate_file(run_dir / "result.json") == []
    assert validate_file(run_dir / "run.json") == []
    outputs = json.loads((run_dir / "run.json").read_text())["outputs"]
    assert outputs == {"result": "result.json", "summary": "summary.txt", "figures": [PLOTS[name]]}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["identity"]["run_id"] == "t1"
    assert result["environment"]["profile_id"] == "INF-CPU"
    assert (run_dir / "summary.txt").read_text().strip()
    if name in PLOTS:
        assert (run_dir / PLOTS[name]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(run_dir / "result.json") in capsys.readouterr().out


def test_same_inputs_give_byte_identical_results(tmp_path) -> None:
    mech = get_mechanism("batching")
    cfg = BatchingConfig(requests=200, seed=3)
    when = "2026-11-30T08:00:00.000Z"
    a = write_mech_run(tmp_path / "a", "batching", mech.run(cfg), run_id="r", created_utc=when, sign=False).path
    b = write_mech_run(tmp_path / "b", "batching", mech.run(cfg), run_id="r", created_utc=when, sign=False).path
    for name in ("result.json", "summary.txt", "batching.png"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    c = write_mech_run(tmp_path / "c", "batching", mech.run(BatchingConfig(requests=200, seed=4)), run_id="r",
                       created_utc=when, sign=False).path
    assert (a / "result.json").read_bytes() != (c / "result.json").read_bytes()


@pytest.mark.parametrize(("argv", "message"), [
    (["mech", "budget", "--device-memory-gib", "-1"], "--device-memory-gib must be at least"),
    (["mech", "budget", "--batches", "1,x"], "--batches: cannot read 'x' as int"),
    (["mech", "budget", "--kv-dtype", "int4"], "--kv-dtype: 'int4' is not one of"),
    (["mech", "budget", "--make-vars", "BATCHES=1,x RUNTIME=docker"], "--batches: cannot read 'x' as int"),
    (["mech", "budget", "--model", "GPT-9"], "unknown model 'GPT-9'"),
    (["mech", "budget", "--model", "DeepSeek-V3", "--no-sign"], "does not fit"),
    (["mech", "budget"], "would lie outside"),  # signed by default: the output root must be under the cwd
    (["mech", "batching", "--workload", "/nonexistent.jsonl", "--no-sign"], "cannot read workload"),
    (["mech", "batching", "--max-num-seqs", "0"], "--max-num-seqs must be at least 1, got 0"),
    (["mech", "batching", "--max-num-seqs", "512", "--max-num-batched-tokens", "256"], "every running request"),
    (["mech", "batching", "--modes", "warp"], "--modes: 'warp' is not one of"),
    (["mech", "kvcache", "--prefix-tokens", "400", "--input-mean", "300"], "--prefix-tokens (400) must be below"),
    (["mech", "specdec", "--schedule-alpha", "1.5"], "--schedule-alpha must be at most 1"),
    (["mech", "calibrate", "--repeats", "0"], "--repeats must be at least 1"),
    (["mech", "calibrate", "--serve", "--dtype", "fp32"], "--dtype: 'fp32' is not one of"),  # before any start
])
def test_bad_input_is_one_line_and_nonzero(argv: list[str], message: str, tmp_path, capsys) -> None:
    assert main([*argv, "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_workload_file_is_read(tmp_path) -> None:
    rows = [{"index": i, "offset_s": i * 0.5, "input_tokens": 300, "output_tokens": 20, "group": i % 2,
             "prefix_tokens": 256} for i in range(12)]
    path = tmp_path / "w.jsonl"
    workload_id = write_workload_file(path, rows, kind="shared-prefix", arrival={"process": "poisson", "rate_rps": 2.0})
    assert main(["mech", "batching", "--workload", str(path), "--prefix-cache", "hashed", "--modes", "continuous",
                 "--out", str(tmp_path / "out"), "--run-id", "w", "--quiet", "--no-sign"]) == 0
    result = json.loads((tmp_path / "out" / "batching" / "w" / "result.json").read_text())
    assert result["identity"]["workload_id"] == workload_id
    assert result["workload"]["request_count"] == 12
    assert result["details"]["modes"]["continuous"]["kv"]["hit_rate"] > 0.5


def test_a_mechanism_run_is_signed_when_it_ends(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a throwaway signing key
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["mech", "lifecycle", "--out", "runs/mech", "--run-id", "s1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "manifest: manifests/INF-REQUEST-LIFECYCLE/s1.intoto.json" in out
    assert (tmp_path / "manifests/INF-REQUEST-LIFECYCLE/s1.intoto.json").is_file()
    assert main(["audit", "manifests"]) == 0
    assert "1 VALID, 0 INVALID" in capsys.readouterr().out  # the key created here is in the local trust policy


def test_a_run_in_a_role_image_is_queued_and_signed_by_the_host(tmp_path, monkeypatch, capsys) -> None:
    """What `infkit images run` does around a container, in-process: the run lists itself, the host signs it."""
    from harness.rundir.directory import SIGN_QUEUE_ENV, sign_queued

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.chdir(tmp_path)
    queue = tmp_path / "runs" / ".sign-queue-x"
    monkeypatch.setenv(SIGN_QUEUE_ENV, str(queue))
    assert main(["mech", "specdec", "--passes", "200", "--alphas", "0.7", "--gammas", "2", "--calls", "2",
                 "--out", "runs/mech", "--run-id", "q1", "--quiet"]) == 0
    assert queue.read_text().split() == [str(tmp_path / "runs/mech/specdec/q1")]
    assert not (tmp_path / "manifests").exists() and "manifest:" not in capsys.readouterr().out
    monkeypatch.delenv(SIGN_QUEUE_ENV)
    assert sign_queued(queue, tmp_path) == [tmp_path / "manifests/INF-PROPOSAL/q1.intoto.json"]
    assert not queue.exists()
    assert main(["audit", "manifests"]) == 0


def test_make_mech_budget_signs_an_audit_valid_run(tmp_path, repo_root) -> None:
    """The Makefile's own recipe (knobs as Make variables), run as make runs it: signed in-process, VALID."""
    venv = Path(sys.executable).parent.parent
    dry = subprocess.run(["make", "-s", "-n", "mech-budget", f"VENV={venv}", f"MECH_OUT={tmp_path / 'runs/mech'}",
                          "BATCHES=1,8", "CONTEXTS=1024", "MODEL=SmolLM2-135M"],
                         cwd=repo_root, capture_output=True, text=True, check=True)
    (recipe,) = [line for line in dry.stdout.splitlines() if " mech budget " in line]
    assert not [line for line in dry.stdout.splitlines() if "infkit sign" in line]  # nothing signs "the newest" run
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("INFKIT_SIGNING_KEY_PEM", None)
    run = subprocess.run(["bash", "-c", recipe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    (run_dir,) = (tmp_path / "runs/mech/budget").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outputs"] == {"result": "result.json", "summary": "summary.txt", "figures": ["budget.png"]}
    assert record["requested"]["batches"] == [1, 8] and record["requested"]["model"] == "SmolLM2-135M"
    (manifest,) = (tmp_path / "manifests/INF-ITERATION-BUDGET").glob("*.intoto.json")
    assert manifest.name == f"{run_dir.name}.intoto.json"
    assert f"manifest: {manifest.relative_to(tmp_path)}" in run.stdout
    audit = subprocess.run(
        [str(venv / "bin/infkit"), "audit", str(manifest)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert audit.returncode == 0 and "VALID" in audit.stdout and "INVALID" not in audit.stdout.split("\n")[0]


def test_an_edited_workload_file_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "w.jsonl"
    write_workload_file(
        path,
        [{"index": 0, "offset_s": 0.0, "input_tokens": 30, "output_tokens": 4}],
        kind="random",
        arrival={"process": "poisson", "rate_rps": 1.0},
    )
    path.write_text(path.read_text().replace('"input_tokens":30', '"input_tokens":31'))
    assert main(["mech", "batching", "--workload", str(path), "--out", str(tmp_path / "out"), "--no-sign"]) != 0
    assert "does not match its content" in capsys.readouterr().err
