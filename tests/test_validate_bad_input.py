"""Bad input to `infkit validate`: a clear one-line error, exit 1, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.cli import main


def _run(path, capsys):
    rc = main(["validate", str(path)])
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("garbage.json", b"this is { not json", "malformed JSON"),
        ("empty.json", b"", "empty file"),
        ("binary.json", bytes(range(256)) * 4, "binary file"),
        ("latin1.json", '{"a": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
        ("array.json", b"[1, 2, 3]", "a document is a JSON object"),
        ("nomarker.json", b'{"identity": {}}', 'no "schema" marker'),
        ("deep.json", b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        ("garbage.jsonl", b'{"schema": "infkit/workload/v1"}\n{oops\n', "malformed JSON"),
    ],
)
def test_bad_files(tmp_path, capsys, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    rc, err = _run(path, capsys)
    assert rc == 1
    assert expected in err
    assert "Traceback" not in err


def test_missing_file_and_directory(tmp_path, capsys):
    rc, err = _run(tmp_path / "nope.json", capsys)
    assert rc == 1 and "no such file" in err
    rc, err = _run(tmp_path, capsys)
    assert rc == 1 and "is a directory" in err


def test_fifty_megabyte_file(tmp_path, capsys):
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.write(b'{"schema": "infkit/result/v1", "pad": "')
        fh.write(b"x" * (50 * 1024 * 1024))
        fh.write(b'"}')
    rc, err = _run(path, capsys)
    assert rc == 1
    assert "larger than the 32 MiB limit" in err


def test_cli_process_exit_code_and_no_traceback(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "harness", "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "malformed JSON" in proc.stderr
    assert "Traceback" not in proc.stderr
