"""The streaming client: SSE parsing, payloads, termination statuses, worker processes, crash safety."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.client import (
    ClientConfig,
    SSEParser,
    build_payload,
    plan_shares,
    read_records,
    run_client,
)
from harness.client.sse import DONE, interpret
from harness.contract import validate_file
from harness.errors import InvalidInput
from harness.workload import Arrival, Common, Request, make_workload, write_workload

REPO = Path(__file__).resolve().parents[1]



@pytest.fixture(scope="module")
def workload_file(tokenizer_dir, tmp_path_factory) -> Path:
    w = make_workload("random", Common(arrival=Arrival("closed", concurrency=4), requests=30, input_tokens=20,
                                       output_tokens=6), {}, tokenizer_dir)
    return write_workload(tmp_path_factory.mktemp("wl") / "random.jsonl", w)


def _run(
    server: FakeOpenAIServer, requests, path: Path, *, workers=1, concurrency=4, timeout_s=10.0, api="completions"
):
    client = ClientConfig(endpoint=server.url, model="fake", api=api, timeout_s=timeout_s)
    path.write_bytes(b"")
    return run_client(
        plan_shares(
            tuple(requests), client, str(path), workers=workers, closed_concurrency=concurrency, max_concurrency=None
        )
    )


def test_sse_parser_handles_split_reads_comments_and_done():
    p = SSEParser()
    assert p.feed(b': keep-alive\n\ndata: {"a"') == []
    assert p.feed(b": 1}\n\nda") == [{"a": 1}]
    assert p.feed(b'ta: {"b": 2}\r\n\ndata: [DONE]\n\n') == [{"b": 2}, DONE]


def test_sse_payload_with_trailing_garbage_is_malformed():
    parser = SSEParser()
    # What came before the malformed payload is returned; the parse stops at it.
    assert parser.feed(b'data: {"ok": 1}\n\ndata: {"a": 1} {"b": 2}\n\ndata: {"c": 3}\n\n') == [{"ok": 1}]
    assert "extra data" in str(parser.failure) and parser.feed(b'data: {"d": 4}\n\n') == []
    bad = SSEParser()
    assert bad.feed(b"data: {\xff}\n\n") == [] and "not UTF-8" in str(bad.failure)


def test_interpret_completions_chat_usage_and_errors():
    assert interpret({"choices": [{"text": "hi", "finish_reason": None}]}).text == "hi"
    chat = interpret({"choices": [{"delta": {"content": "yo"}, "finish_reason": "stop"}]})
    assert (chat.text, chat.finish_reason) == ("yo", "stop")
    assert interpret({"choices": [{"delta": {"role": "assistant"}}]}).text == ""
    usage = interpret({"choices": [], "usage": {"completion_tokens": 3}})
    assert usage.usage == {"completion_tokens": 3} and usage.text == ""
    assert interpret({"error": {"message": "boom"}}).error == "boom"
    assert interpret({"object": "error", "message": "too long", "code": 400}).error == "too long"


def test_payload_flags():
    req = Request(index=0, input_tokens=3, output_tokens=7, prompt="a b c")
    base = build_payload(ClientConfig("http://x", "m"), req)
    assert base["stream"] and base["max_tokens"] == 7
    assert base["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    whole = build_payload(ClientConfig("http://x", "m", stream=False), req)
    assert whole["stream"] is False and "stream_options" not in whole
    assert "ignore_eos" not in base and "min_tokens" not in base
    asked = build_payload(ClientConfig("http://x", "m", ignore_eos=True, min_tokens=True), req)
    assert asked["ignore_eos"] is True and asked["min_tokens"] == 7
    chat = build_payload(ClientConfig("http://x", "m", api="chat"), req)
    assert chat["messages"] == [{"role": "user", "content": "a b c"}] and "prompt" not in chat


def test_records_carry_timing_usage_and_text(workload_file, tmp_path):
    from harness.workload import load_workload

    w = load_workload(workload_file)
    with FakeOpenAIServer(FakeConfig(ttft_s=0.03, gap_s=0.005)) as srv:
        run = _run(srv, w.requests[:8], tmp_path / "r.jsonl")
    recs = read_records(tmp_path / "r.jsonl")
    assert [r.index for r in recs] == list(range(8)) and not run.interrupted
    for r in recs:
        assert r.status == "length" and r.finish_reason == "length"
        assert r.completion_tokens == 6 and len(r.chunk_s) == 6 and r.output_text == " tok" * 6
        assert r.prompt_tokens == 20 and r.input_tokens == 20
        assert r.sent_s <= r.first_token_s <= r.end_s
        assert 0.03 <= r.first_token_s - r.sent_s < 0.2
        assert list(r.chunk_s) == sorted(r.chunk_s)


def test_faults_become_termination_statuses(workload_file, tmp_path):
    from harness.workload import load_workload

    w = load_workload(workload_file)
    cfg = FakeConfig(ttft_s=0.005, gap_s=0.001, fail_every=5, error_every=7, disconnect_every=6)
    with FakeOpenAIServer(cfg) as srv:
        _run(srv, w.requests, tmp_path / "r.jsonl")
    recs = read_records(tmp_path / "r.jsonl")
    counts = collections.Counter(r.status for r in recs)
    # ordinals 1..30: HTTP 500 at 5,10,..,30 (6); stream error at 7,14,21,28 (4); drop at 6,12,18,24 (4)
    assert counts == {"length": 16, "error": 10, "disconnected": 4}
    http = [r for r in recs if r.http_status == 500]
    assert len(http) == 6 and all("injected failure" in r.error for r in http)
    dropped = [r for r in recs if r.status == "disconnected"]
    assert all(len(r.chunk_s) == 2 for r in dropped)  # what arrived before the drop is kept


def test_stalled_streams_time_out(workload_file, tmp_path):
    from harness.workload import load_workload

    w = load_workload(workload_file)
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, stall_every=3)) as srv:
        started = time.monotonic()
        _run(srv, w.requests[:9], tmp_path / "r.jsonl", timeout_s=0.4)
        assert time.monotonic() - started < 5
    counts = collections.Counter(r.status for r in read_records(tmp_path / "r.jsonl"))
    assert counts == {"length": 6, "timeout": 3}


def test_worker_processes_share_one_file(workload_file, tmp_path):
    from harness.workload import load_workload

    w = load_workload(workload_file)
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        run = _run(srv, w.requests, tmp_path / "r.jsonl", workers=2)
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 30 and all(json.loads(line)["status"] == "length" for line in lines)
    assert run.workers == 2 and {json.loads(line)["worker"] for line in lines} == {0, 1}
    assert sorted(s.records_written for s in run.stats) == [15, 15]


def _start_cli_run(srv: FakeOpenAIServer, workload: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--endpoint",
            srv.url,
            "--model",
            "fake",
            "--workload",
            str(workload),
            "--out",
            str(out),
            "--max-concurrency",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_records(path: Path, n: int, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} records")


def test_killed_run_keeps_every_finished_record(workload_file, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.05, gap_s=0.03)) as srv:
        proc = _start_cli_run(srv, workload_file, tmp_path / "run")
        _wait_for_records(tmp_path / "run" / "requests.jsonl", 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    recs = read_records(tmp_path / "run" / "requests.jsonl")
    assert 3 <= len(recs) < 30 and all(r.status == "length" and r.completion_tokens == 6 for r in recs)


def test_ctrl_c_writes_what_finished_and_an_aborted_result(workload_file, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.05, gap_s=0.03)) as srv:
        proc = _start_cli_run(srv, workload_file, tmp_path / "run")
        _wait_for_records(tmp_path / "run" / "requests.jsonl", 2)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    result = tmp_path / "run" / "result.json"
    assert validate_file(result) == []
    doc = json.loads(result.read_text())
    counts = doc["correctness"]["termination_counts"]
    assert sum(counts.values()) == 30 and counts.get("length", 0) >= 2
    assert counts.get("cancelled", 0) + counts.get("not_sent", 0) >= 1
    assert doc["conclusion"]["failure"]["kind"] == "aborted" and doc["conclusion"]["valid"] is False


def test_read_records_skips_a_torn_last_line_only(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"index": 1, "status": "stop"}\n{"index": 0, "status": "length"}\n{"index": 2, "sta')
    assert [(r.index, r.status) for r in read_records(path)] == [(0, "length"), (1, "stop")]
    path.write_text('{"index": 1, "sta\n{"index": 0, "status": "length"}\n')
    with pytest.raises(InvalidInput, match=":1: not a request record"):
        read_records(path)
