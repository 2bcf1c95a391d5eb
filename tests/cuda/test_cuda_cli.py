"""`infkit cuda`: one-line errors naming the flag, exit codes, run directory layout, signing when a run ends."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.cuda.registry import experiments

BAD_KNOBS = [
    (["attention", "--backends", "flash,warp"], "--backends: 'warp' is not one of auto, math"),
    (["attention", "--dtype", "float8"], "--dtype: 'float8' is not one of"),
    (["budget", "--batches", "1,x"], "--batches: cannot read 'x' as int"),
    (["budget", "--contexts", "0"], "--contexts must be at least 1, got 0"),
    (["budget", "--arch", "Falcon-7B"], "not a Llama-architecture model"),
    (["dispatch", "--modes", "jit"], "--modes: 'jit' is not one of"),
    (["overlap", "--iters", "0"], "--iters must be at least 1, got 0"),
    (["proposal", "--prompts", "99"], "--prompts must be at most"),
    (["proposal", "--make-vars", "CONFIDENCE_THRESHOLD=2 GPU=0"], "--confidence-threshold must be at most 1"),
]


def test_every_experiment_module_is_discovered():
    assert set(experiments()) == {"attention", "budget", "dispatch", "overlap", "proposal"}


@pytest.mark.parametrize(("argv", "message"), BAD_KNOBS)
def test_bad_knob_is_one_line_error_naming_the_flag(argv, message, capsys, tmp_path):
    rc = main(["cuda", *argv, "--out", str(tmp_path)])  # checked before torch is imported or a folder made
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and message in err[0], err
    assert not list(tmp_path.iterdir())


def test_cuda_without_gpu_exits_3(capsys, torch, tmp_path):
    if torch.cuda.is_available():
        return
    rc = main(["cuda", "overlap", "--device", "cuda", "--out", str(tmp_path), "--no-sign"])
    assert rc == 3 and "no CUDA device" in capsys.readouterr().err


def test_missing_model_leaves_no_run_directory(capsys, torch, tmp_path):
    rc = main(["cuda", "proposal", "--model", str(tmp_path / "absent"), "--out", str(tmp_path / "runs"), "--no-sign"])
    assert rc in (1, 3) and "absent" in capsys.readouterr().err
    assert not list((tmp_path / "runs").rglob("*.json"))


def test_run_writes_the_documented_files(capsys, torch, tmp_path):
    rc = main(["cuda", "overlap", "--out", str(tmp_path), "--no-sign"])
    assert rc == 0
    (run_dir,) = (tmp_path / "overlap").iterdir()
    assert {p.name for p in run_dir.iterdir()} >= {"result.json", "run.json", "summary.txt", "fingerprint.json"}
    run = json.loads((run_dir / "run.json").read_text())
    assert run["requested"]["device"] == "auto" and run["effective"]["device"] in ("cpu", "cuda")
    assert run["outputs"] == {"result": "result.json", "summary": "summary.txt", "figures": []}
    assert "result:" in capsys.readouterr().out


def test_a_cuda_run_is_signed_when_it_ends(capsys, torch, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a throwaway signing key
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["cuda", "attention", "--seq-len", "16", "--heads", "1", "--iters", "1", "--backends", "math"]) == 0
    (run_dir,) = (tmp_path / "runs" / "cuda" / "attention").iterdir()
    manifest = tmp_path / "manifests" / "INF-EXECUTION-DISPATCH" / f"{run_dir.name}.intoto.json"
    assert f"manifest: {manifest.relative_to(tmp_path)}" in capsys.readouterr().out
    assert main(["audit", "manifests"]) == 0
    assert "1 VALID, 0 INVALID" in capsys.readouterr().out  # the key created here is in the local trust policy


def test_a_failed_run_with_samples_is_kept_and_signed_one_without_is_removed(torch, tmp_path, monkeypatch):
    from harness.cuda.registry import get_experiment
    from harness.cuda.runner import run_experiment

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.chdir(tmp_path)
    exp = get_experiment("attention")

    def fail_after_samples(config, ctx):
        ctx.samples.write({"series": "s", "ms": [1.0]})
        raise RuntimeError("device lost")

    def fail_at_once(config, ctx):
        raise RuntimeError("nothing measured")

    with pytest.raises(RuntimeError, match="device lost"):
        run_experiment(type(exp)(exp.name, exp.semantic_id, exp.help, exp.config, fail_after_samples),
                       exp.config(), device="cpu", out_root=tmp_path / "runs")
    (kept,) = (tmp_path / "runs" / "attention").iterdir()
    run = json.loads((kept / "run.json").read_text())
    assert run["status"] == "failed" and "device lost" in run["effective"]["error"]
    assert (tmp_path / "manifests" / "INF-EXECUTION-DISPATCH" / f"{kept.name}.intoto.json").is_file()
    with pytest.raises(RuntimeError, match="nothing measured"):
        run_experiment(type(exp)(exp.name, exp.semantic_id, exp.help, exp.config, fail_at_once),
                       exp.config(), device="cpu", out_root=tmp_path / "runs")
    assert list((tmp_path / "runs" / "attention").iterdir()) == [kept]


def test_workload_id_ignores_where_it_runs_but_not_what():
    from harness.cuda.attention import AttentionConfig
    from harness.cuda.runner import workload_id

    base = workload_id("attention", AttentionConfig())
    assert workload_id("attention", AttentionConfig(threads=1)) == base
    assert workload_id("attention", AttentionConfig(seq_len=1024)) != base
    assert workload_id("dispatch", AttentionConfig()) != base
