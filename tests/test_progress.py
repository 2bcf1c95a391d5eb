"""Progress on long work: the record tail counts what the client appended; plain lines when not a terminal."""

from __future__ import annotations

import io
import json

from harness.progress import LiveReporter, RecordTail, Reporter, reporter


def append(path, *statuses):
    with path.open("a") as fh:
        for s in statuses:
            fh.write(json.dumps({"index": 0, "status": s}) + "\n")


def test_the_tail_counts_new_records_errors_and_a_torn_line_once_complete(tmp_path):
    path = tmp_path / "requests.jsonl"
    tail = RecordTail(path)
    assert tail.poll() == (0, 0)  # not there yet
    append(path, "stop", "length", "timeout")
    assert tail.poll() == (3, 1)
    with path.open("a") as fh:
        fh.write('{"index": 3, "status": "er')  # a writer mid-line
    assert tail.poll() == (3, 1)
    with path.open("a") as fh:
        fh.write('ror"}\n')
    assert tail.poll() == (4, 2)
    path.write_text("")  # truncated: a new run in the same file
    append(path, "stop")
    assert tail.poll() == (1, 0)


def test_plain_reporter_prints_status_lines_with_job_progress_and_server_state(tmp_path):
    out = io.StringIO()
    rep = Reporter(out, every_s=3600)
    rep.begin(4, "4 arm runs")
    rep.state("server a: serving x")
    path = tmp_path / "requests.jsonl"
    with rep.task("x", 2, path):
        append(path, "stop", "error")
    rep.step_done(10.0)
    text = out.getvalue()
    assert text.splitlines()[0] == "4 arm runs"
    assert "x: 2/2 requests, 1 errors" in text and "step 1/4" in text and "server a: serving x" in text
    assert rep.job_eta_s() == 30.0


def test_ci_and_pipes_get_plain_lines(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert type(reporter(out=io.StringIO())) is Reporter

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("CI")
    monkeypatch.delenv("INFKIT_PROGRESS", raising=False)
    assert isinstance(reporter(out=Tty()), LiveReporter)
    monkeypatch.setenv("INFKIT_PROGRESS", "plain")
    assert type(reporter(out=Tty())) is Reporter
