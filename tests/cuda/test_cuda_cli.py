"""`infkit cuda`: one-line errors, exit codes, run directory layout."""

from __future__ import annotations

import json

from harness.cli import main


def test_unknown_backend_is_one_line_error(capsys, torch, tmp_path):
    rc = main(["cuda", "attention", "--backends", "flash,warp", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "unknown SDPA backend" in err[0]
    assert not list(tmp_path.iterdir())


def test_unparseable_list_names_the_flag(capsys, torch, tmp_path):
    rc = main(["cuda", "budget", "--batches", "1,x", "--out", str(tmp_path)])
    assert rc == 1 and "--batches" in capsys.readouterr().err


def test_cuda_without_gpu_exits_3(capsys, torch, tmp_path):
    if torch.cuda.is_available():
        return
    rc = main(["cuda", "overlap", "--device", "cuda", "--out", str(tmp_path)])
    assert rc == 3 and "no CUDA device" in capsys.readouterr().err


def test_missing_model_leaves_no_run_directory(capsys, torch, tmp_path):
    rc = main(["cuda", "proposal", "--model", str(tmp_path / "absent"), "--out", str(tmp_path / "runs")])
    assert rc in (1, 3) and "absent" in capsys.readouterr().err
    assert not list((tmp_path / "runs").rglob("*.json"))


def test_run_writes_the_documented_files(capsys, torch, tmp_path):
    rc = main(["cuda", "overlap", "--out", str(tmp_path)])
    assert rc == 0
    (run_dir,) = (tmp_path / "overlap").iterdir()
    assert {p.name for p in run_dir.iterdir()} >= {"result.json", "run.json", "summary.txt"}
    run = json.loads((run_dir / "run.json").read_text())
    assert run["requested"]["device"] == "auto" and run["effective"]["device"] in ("cpu", "cuda")
    assert "result:" in capsys.readouterr().out


def test_a_cuda_run_can_be_signed_and_audited(capsys, torch, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a throwaway signing key
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    root = tmp_path / "repo"
    assert main(["cuda", "attention", "--seq-len", "16", "--heads", "1", "--iters", "1", "--backends", "math",
                 "--out", str(root / "runs" / "cuda")]) == 0
    (run_dir,) = (root / "runs" / "cuda" / "attention").iterdir()
    assert (run_dir / "fingerprint.json").exists()
    assert main(["sign", str(run_dir), "--root", str(root)]) == 0
    capsys.readouterr()
    assert main(["audit", str(root / "manifests"), "--root", str(root)]) == 0, capsys.readouterr().out


def test_workload_id_ignores_where_it_runs_but_not_what():
    from harness.cuda.attention import AttentionConfig
    from harness.cuda.runner import workload_id

    base = workload_id("attention", AttentionConfig())
    assert workload_id("attention", AttentionConfig(threads=1)) == base
    assert workload_id("attention", AttentionConfig(seq_len=1024)) != base
    assert workload_id("dispatch", AttentionConfig()) != base
