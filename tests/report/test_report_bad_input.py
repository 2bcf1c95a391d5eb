"""Bad inputs to infkit report: INVALID rows or one-line errors, never a traceback, nothing half-written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.report import build as build_mod
from harness.report.build import ReportConfig, build_report
from harness.report.reader import _read_figure


def run_report(root, *args: str):
    proc = root.infkit("report", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_unreadable_inputs_are_invalid_rows_with_their_reason(root, mech_runs, tmp_path):
    unsigned = root.path / "runs" / "unsigned-copy"
    unsigned.mkdir(parents=True)
    run = mech_runs["budget"].run_json() | {"run_id": "unsigned-run"}
    (unsigned / "run.json").write_text(json.dumps(run))
    broken_run = root.path / "runs" / "broken-run"
    broken_run.mkdir(parents=True, exist_ok=True)
    (broken_run / "run.json").write_text("{not json")
    garbage = root.path / "garbage.intoto.json"
    garbage.write_text("hello")
    empty = root.path / "empty-folder"
    empty.mkdir(exist_ok=True)
    out = tmp_path / "out"
    proc = run_report(root, str(mech_runs["budget"].run_dir), "no/such/run", str(unsigned), str(broken_run),
                      str(garbage), str(empty), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "report.json").read_text())
    assert doc["counts"] == {"inputs": 6, "valid": 1, "invalid": 5}
    reasons = {r["input"]: " ".join(x["message"] for x in r["reasons"]) for s in doc["benches"] for r in s["runs"]
               if r["verdict"] == "INVALID"}
    assert reasons["no/such/run"] == "no such file or directory"
    assert reasons[str(unsigned)].startswith("unsigned: no manifest at")
    assert "malformed JSON" in reasons[str(broken_run)]
    assert "envelope" in json.dumps(doc) and reasons[str(garbage)]
    assert reasons[str(empty)].startswith("neither a run directory")
    assert "5 INVALID" in proc.stdout


def test_a_run_dir_whose_manifest_signs_another_directory_is_invalid(root, mech_runs, tmp_path):
    # a copy of a signed run under another name: its run.json leads to the original's manifest
    copy = mech_runs["budget"].run_dir.with_name("copied-elsewhere")
    shutil.copytree(mech_runs["budget"].run_dir, copy, dirs_exist_ok=True)
    out = tmp_path / "out"
    assert run_report(root, str(copy), "-o", str(out)).returncode == 0
    (row,) = [r for s in json.loads((out / "report.json").read_text())["benches"] for r in s["runs"]]
    assert row["verdict"] == "INVALID" and "signs the run directory" in row["reasons"][0]["message"]
    assert row["headline"] == []


@pytest.mark.parametrize("case", ["file", "foreign-folder", "parent-is-a-file"])
def test_a_bad_output_path_is_one_line_before_any_work(root, mech_runs, tmp_path, case):
    out = tmp_path / "o"
    if case == "file":
        out.write_text("keep me")
    elif case == "foreign-folder":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    else:
        (tmp_path / "plain").write_text("")
        out = tmp_path / "plain" / "o"
    proc = run_report(root, str(mech_runs["budget"].run_dir), "-o", str(out))
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("infkit report: error: -o ")
    if case == "file":
        assert out.read_text() == "keep me"
    elif case == "foreign-folder":
        assert sorted(os.listdir(out)) == ["notes.txt"]


def test_no_inputs_is_a_usage_error(root):
    proc = run_report(root, "-o", "x")
    assert proc.returncode == 2 and "RUN_OR_MANIFEST" in proc.stderr


def test_an_error_while_writing_leaves_the_previous_report_and_no_temp_folder(root, mech_runs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    build_report([str(mech_runs["budget"].run_dir)], ReportConfig(out_dir=out, root=root.path))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def boom(doc):
        raise OSError("disk full")

    monkeypatch.setattr(build_mod, "render_markdown", boom)
    with pytest.raises(OSError):
        build_report([str(mech_runs["kvcache"].run_dir)], ReportConfig(out_dir=out, root=root.path))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_report_folder_is_replaced_whole(root, mech_runs, tmp_path):
    out = tmp_path / "out"
    build_report([str(mech_runs["kvcache"].run_dir)], ReportConfig(out_dir=out, root=root.path))
    build_report([str(mech_runs["budget"].run_dir)], ReportConfig(out_dir=out, root=root.path, charts=False))
    assert sorted(os.listdir(out)) == [".infkit-report", "index.html", "report.json", "report.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_figure_that_changed_after_the_audit_is_left_out(tmp_path):
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"x" * 10)
    figure, note = _read_figure(tmp_path, "f.png", "0" * 64)
    assert figure is None and "changed after the audit" in note
    figure, note = _read_figure(tmp_path, "f.png", hashlib.sha256(png.read_bytes()).hexdigest())
    assert figure is not None and note is None
    not_png = Path(tmp_path / "g.png")
    not_png.write_bytes(b"GIF89a")
    figure, note = _read_figure(tmp_path, "g.png", hashlib.sha256(b"GIF89a").hexdigest())
    assert figure is None and "not a PNG" in note
