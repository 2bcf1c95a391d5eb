"""Per-token ITL beside chunk ITL, and non-streamed requests, against the fake server's edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.client import ClientConfig, RequestRecord, plan_shares, read_records, run_client
from harness.serving.metrics import chunk_token_counts, performance, token_gaps
from harness.workload import Arrival, Common, ExactTokenizer, make_workload


@pytest.fixture(scope="module")
def requests(tokenizer_dir):
    w = make_workload("random", Common(arrival=Arrival("closed", concurrency=2), requests=4, input_tokens=12,
                                       output_tokens=9), {}, tokenizer_dir)
    return w.requests


def _run(srv: FakeOpenAIServer, requests, path: Path, **client) -> list[RequestRecord]:
    cfg = ClientConfig(endpoint=srv.url, model="fake", timeout_s=10.0, **client)
    run_client(plan_shares(tuple(requests), cfg, str(path), workers=1, closed_concurrency=2, max_concurrency=None))
    return read_records(path)


def test_token_gaps_spread_each_gap_over_its_tokens():
    assert token_gaps([0.0, 0.03, 0.04], [1, 3, 1]) == pytest.approx([10.0, 10.0, 10.0, 10.0])
    assert token_gaps([0.0, 0.01, 0.03], [2, 0, 4]) == pytest.approx([7.5] * 4)  # an empty chunk hands its gap on


def test_multi_token_chunks_give_fewer_longer_chunk_gaps_than_token_gaps(requests, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.03, tokens_per_chunk=3)) as srv:
        recs = _run(srv, requests, tmp_path / "r.jsonl")
    assert all(r.chunk_tokens == (3, 3, 3) and len(r.chunk_s) == 3 for r in recs)
    perf = performance(recs)
    assert perf["chunk_tokens_source"] == "server_usage"
    assert perf["itl_chunk_ms"] == perf["itl_ms"] and perf["itl_chunk_ms"]["n"] == 4 * 2
    assert perf["itl_token_ms"]["n"] == 4 * 6  # every token after the first chunk
    assert perf["itl_token_ms"]["p50"] == pytest.approx(perf["itl_chunk_ms"]["p50"] / 3, rel=0.05)


def test_without_per_chunk_usage_the_tokenizer_counts_and_says_so(requests, tmp_path, tokenizer_dir):
    cfg = FakeConfig(ttft_s=0.01, gap_s=0.01, tokens_per_chunk=2, reply=" ka")
    with FakeOpenAIServer(cfg) as srv:
        recs = _run(srv, requests, tmp_path / "r.jsonl", per_chunk_usage=False)
    assert all(r.chunk_tokens == () and r.chunk_chars == (6, 6, 6, 6, 3) for r in recs)
    tok = ExactTokenizer(tokenizer_dir)
    counts, source = chunk_token_counts(recs[0], tok.token_ends)
    assert source == "tokenizer" and sum(counts) == tok.count(recs[0].output_text) and len(counts) == 5
    assert performance(recs, token_ends=tok.token_ends)["chunk_tokens_source"] == "tokenizer"
    bare = performance(recs)
    assert bare["itl_token_ms"] is None and "no per-chunk usage" in bare["null_reasons"]["itl_token_ms"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_non_streamed_requests_keep_e2e_and_throughput_only(requests, tmp_path, api):
    msgs = [r.__class__(**{**r.__dict__, "messages": ({"role": "user", "content": r.prompt},), "prompt": None})
            for r in requests] if api == "chat" else requests
    with FakeOpenAIServer(FakeConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        recs = _run(srv, msgs, tmp_path / "r.jsonl", stream=False, api=api)
        assert all(b["stream"] is False and "stream_options" not in b for b in srv.bodies)
    assert all(r.status == "length" and r.completion_tokens == 9 and r.output_text == " tok" * 9 for r in recs)
    assert all(r.first_token_s is None and r.chunk_s == () and r.end_s - r.sent_s >= 0.02 + 8 * 0.005 for r in recs)
    perf = performance(recs, streamed=False)
    assert perf["e2e_ms"]["n"] == 4 and perf["throughput"]["output_tokens_per_s"] > 0
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "itl_token_ms"):
        assert perf[key] is None and "not streamed" in perf["null_reasons"][key]


def test_cli_run_no_stream_writes_a_valid_result_with_the_reasons(tokenizer_dir, tmp_path, capsys):
    import json

    from harness.cli import main
    from harness.contract import validate_file
    from harness.workload import write_workload

    wl = write_workload(tmp_path / "w.jsonl", make_workload(
        "random", Common(arrival=Arrival("closed", concurrency=2), requests=6, input_tokens=12, output_tokens=5), {},
        tokenizer_dir))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        code = main(["run", "--endpoint", srv.url, "--model", "fake", "--workload", str(wl), "--out",
                     str(tmp_path / "run"), "--no-stream"])
    assert code == 0 and "VALID" in capsys.readouterr().out
    assert validate_file(tmp_path / "run" / "result.json") == []
    perf = json.loads((tmp_path / "run" / "result.json").read_text())["performance"]
    assert perf["streamed"] is False and perf["ttft_ms"] is None and perf["e2e_ms"]["n"] == 6
    assert "not streamed" in perf["null_reasons"]["ttft_ms"]


def test_cli_run_streams_report_both_itl_kinds(tokenizer_dir, tmp_path, capsys):
    import json

    from harness.cli import main
    from harness.contract import validate_file
    from harness.workload import write_workload

    wl = write_workload(tmp_path / "w.jsonl", make_workload(
        "random", Common(arrival=Arrival("closed", concurrency=2), requests=6, input_tokens=12, output_tokens=8), {},
        tokenizer_dir))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.01, tokens_per_chunk=2)) as srv:
        assert main(["run", "--endpoint", srv.url, "--model", "fake", "--workload", str(wl), "--out",
                     str(tmp_path / "run")]) == 0
    assert "itl_token_ms" in capsys.readouterr().out
    assert validate_file(tmp_path / "run" / "result.json") == []
    perf = json.loads((tmp_path / "run" / "result.json").read_text())["performance"]
    assert perf["itl_chunk_ms"]["n"] == 6 * 3 and perf["itl_token_ms"]["n"] == 6 * 6 and perf["streamed"] is True
