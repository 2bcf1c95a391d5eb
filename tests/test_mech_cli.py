"""infkit mech NAME end to end: schema-valid result and run.json, summary, plots, determinism, one-line errors."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.contract import validate_file
from harness.mech import MECHANISMS, get_mechanism
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


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_each_mechanism_writes_a_valid_run(name: str, tmp_path, capsys) -> None:
    assert main(["mech", name, "--out", str(tmp_path), "--run-id", "t1", *FAST_ARGS[name]]) == 0
    run_dir = tmp_path / name / "t1"
    assert validate_file(run_dir / "result.json") == []
    assert validate_file(run_dir / "run.json") == []
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
    a = write_mech_run(tmp_path / "a", "batching", mech.run(cfg), run_id="r", created_utc="2026-11-30T08:00:00.000Z")
    b = write_mech_run(tmp_path / "b", "batching", mech.run(cfg), run_id="r", created_utc="2026-11-30T08:00:00.000Z")
    assert (a / "result.json").read_bytes() == (b / "result.json").read_bytes()
    c = write_mech_run(tmp_path / "c", "batching", mech.run(BatchingConfig(requests=200, seed=4)), run_id="r",
                       created_utc="2026-11-30T08:00:00.000Z")
    assert (a / "result.json").read_bytes() != (c / "result.json").read_bytes()


@pytest.mark.parametrize(("argv", "message"), [
    (["mech", "budget", "--device-memory-gib", "-1"], "device_memory_gib must be positive"),
    (["mech", "budget", "--model", "DeepSeek-V3"], "does not fit"),
    (["mech", "batching", "--workload", "/nonexistent.jsonl"], "cannot read workload"),
    (["mech", "batching", "--max-num-seqs", "0"], "max_num_seqs must be >= 1"),
    (["mech", "batching", "--modes", "warp"], "unknown modes"),
    (["mech", "specdec", "--schedule-alpha", "1.5"], "alpha must be in"),
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
                 "--out", str(tmp_path / "out"), "--run-id", "w", "--quiet"]) == 0
    result = json.loads((tmp_path / "out" / "batching" / "w" / "result.json").read_text())
    assert result["identity"]["workload_id"] == workload_id
    assert result["workload"]["request_count"] == 12
    assert result["details"]["modes"]["continuous"]["kv"]["hit_rate"] > 0.5


def test_a_mechanism_run_can_be_signed_and_audited(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the default key is created there
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["mech", "lifecycle", "--out", "runs/mech", "--run-id", "s1", "--quiet"]) == 0
    assert (tmp_path / "runs/mech/lifecycle/s1/fingerprint.json").exists()
    assert main(["sign", "runs/mech/lifecycle/s1"]) == 0
    assert main(["audit", "manifests"]) == 0


def test_an_edited_workload_file_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "w.jsonl"
    write_workload_file(path, [{"index": 0, "offset_s": 0.0, "input_tokens": 30, "output_tokens": 4}],
                        kind="random", arrival={"process": "poisson", "rate_rps": 1.0})
    path.write_text(path.read_text().replace('"input_tokens":30', '"input_tokens":31'))
    assert main(["mech", "batching", "--workload", str(path), "--out", str(tmp_path / "out")]) != 0
    assert "does not match its content" in capsys.readouterr().err
