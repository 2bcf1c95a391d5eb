"""MODEL= at an endpoint: a checkpoint this machine holds names the result's model and tokenizer by their digests,
and a workload made with another tokenizer is refused before any request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, infkit
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.cli import main
from harness.models.identity import digest_of
from harness.models.resolve import identify_served, resolve_checkpoint
from harness.workload import Arrival, Common, make_workload, write_workload
from tests.tiny_tokenizer import train_tokenizer


@pytest.fixture
def checkpoint(tokenizer_dir, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "infkit-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tokenizer_dir, ckpt)
    (ckpt / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 1024}))
    (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
    return ckpt


def workload(path: Path, tokenizer: Path) -> Path:
    common = Common(arrival=Arrival("closed", concurrency=1), requests=3, input_tokens=16, output_tokens=4)
    return write_workload(path, make_workload("random", common, {}, tokenizer))


def test_a_served_name_is_identified_only_where_this_machine_holds_it(checkpoint):
    assert identify_served("fake") is None and identify_served("acme/not-here") is None
    found = identify_served(str(checkpoint))
    assert found is not None and found.path == checkpoint


def test_run_names_the_checkpoint_it_measured(checkpoint, tmp_path, capsys):
    made = workload(tmp_path / "w.jsonl", checkpoint)
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001)) as srv:
        assert main(["run", "--endpoint", srv.url, "--model", str(checkpoint), "--workload", str(made),
                     "--out", str(tmp_path / "out")]) == 0
    identity = json.loads((tmp_path / "out" / "result.json").read_text())["identity"]
    model = resolve_checkpoint(str(checkpoint))
    assert model is not None and identity["model"] == {"name": "ckpt", "version": model.checkpoint_sha256}
    assert model.checkpoint_sha256 == digest_of(model.origin["files"])
    assert identity["tokenizer"]["version"] == model.tokenizer_sha256


def test_run_refuses_a_workload_made_with_another_tokenizer(checkpoint, tmp_path):
    other = train_tokenizer(tmp_path / "other-tok", vocab_size=600, seed=3)
    made = workload(tmp_path / "w.jsonl", other)
    proc = infkit("run", "--endpoint", "http://127.0.0.1:9", "--model", str(checkpoint), "--workload", str(made),
                  "--out", str(tmp_path / "out"), env={"INFKIT_CACHE": str(tmp_path / "infkit-cache")})
    assert_clean_error(proc, "was made with another tokenizer", f"make it with --tokenizer {checkpoint}")
    assert not (tmp_path / "out").exists()


def test_run_refuses_a_directory_that_is_not_a_checkpoint(tmp_path, tokenizer_dir):
    made = workload(tmp_path / "w.jsonl", tokenizer_dir)
    proc = infkit("run", "--endpoint", "http://127.0.0.1:9", "--model", str(tokenizer_dir), "--workload", str(made),
                  "--out", str(tmp_path / "out"), env={"INFKIT_CACHE": str(tmp_path / "infkit-cache")})
    assert_clean_error(proc, "not a checkpoint (no config.json)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["doctor"], ["mech", "calibrate", "--serve", "--no-sign"]])
def test_doctor_and_calibrate_refuse_a_model_they_cannot_serve_before_any_start(tmp_path, command):
    bad = tmp_path / "not-a-checkpoint"
    bad.mkdir()
    proc = infkit(*command, "--model", str(bad), cwd=tmp_path, env={"INFKIT_CACHE": str(tmp_path / "infkit-cache")})
    assert_clean_error(proc, "not a checkpoint (no config.json)")
    assert not (tmp_path / "infkit-cache" / "venvs").exists() and not (tmp_path / "runs").exists()


def test_calibrate_refuses_a_model_shorter_than_its_longest_request_before_any_start(checkpoint, tmp_path):
    proc = infkit("mech", "calibrate", "--serve", "--no-sign", "--model", str(checkpoint), cwd=tmp_path,
                  env={"INFKIT_CACHE": str(tmp_path / "infkit-cache")})
    assert_clean_error(proc, "the calibration's longest request is 1544 tokens, more than ckpt's context of 1024 "
                             "(max_position_embeddings in")
    assert not (tmp_path / "infkit-cache" / "venvs").exists() and not (tmp_path / "runs").exists()
