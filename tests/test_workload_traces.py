"""Trace workloads: the four formats, rescaling that keeps the sharing structure, the reuse ceiling, bad rows."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.errors import InvalidInput
from harness.workload import (
    Arrival,
    Common,
    ExactTokenizer,
    load_workload,
    make_workload,
    write_workload,
)
from harness.workload.traceio import TraceRow, sharing

MOONCAKE = [  # 512-token blocks; rows 0, 1 and 3 share block 10, rows 0 and 1 also block 11
    {"timestamp": 0, "input_length": 1100, "output_length": 40, "hash_ids": [10, 11, 12]},
    {"timestamp": 500, "input_length": 1300, "output_length": 20, "hash_ids": [10, 11, 13]},
    {"timestamp": 1500, "input_length": 600, "output_length": 8, "hash_ids": [20, 21]},
    {"timestamp": 3000, "input_length": 900, "output_length": 16, "hash_ids": [10, 30]},
]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _ids(tok: ExactTokenizer, text: str) -> list[int]:
    return tok.ids(text)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _mooncake(tokenizer_dir, tmp_path, kind="trace", **opts):
    trace = _jsonl(tmp_path / "mooncake.jsonl", MOONCAKE)
    return make_workload(kind, Common(arrival=Arrival("trace"), seed=3),
                         {"trace": trace, "trace_format": "mooncake", "block_tokens": 16, **opts}, tokenizer_dir)


def test_equal_hash_id_prefixes_give_identical_token_prefixes_and_different_ids_share_none(tokenizer_dir, tmp_path):
    w = _mooncake(tokenizer_dir, tmp_path)
    tok = ExactTokenizer(tokenizer_dir)
    ids = [_ids(tok, r.prompt) for r in w.requests]
    # 512-token blocks rescaled to 16: lengths by 16/512, at least every block's first token
    assert [r.input_tokens for r in w.requests] == [34, 41, 19, 28]
    assert [len(x) for x in ids] == [r.input_tokens for r in w.requests]  # exact counts
    assert [r.output_tokens for r in w.requests] == [1, 1, 1, 1]  # 40, 20, 8, 16 x 16/512, at least 1
    # common hash-id prefix k → exactly k blocks of tokens in common, not one token more
    assert _common_prefix(ids[0], ids[1]) == 2 * 16
    assert _common_prefix(ids[0], ids[3]) == 16
    assert _common_prefix(ids[0], ids[2]) == 0 and _common_prefix(ids[1], ids[2]) == 0
    # the same block is byte-identical wherever it appears
    assert ids[3][:16] == ids[0][:16] == ids[1][:16]
    assert [r.hash_ids for r in w.requests] == [tuple(r["hash_ids"]) for r in MOONCAKE]
    assert [r.offset_s for r in w.requests] == [0.0, 0.5, 1.5, 3.0]


def test_the_twin_keeps_lengths_and_arrivals_and_shares_nothing(tokenizer_dir, tmp_path):
    shared, unique = _mooncake(tokenizer_dir, tmp_path), _mooncake(tokenizer_dir, tmp_path, "trace-unique")
    tok = ExactTokenizer(tokenizer_dir)
    assert [(r.input_tokens, r.output_tokens, r.offset_s) for r in shared.requests] == \
        [(r.input_tokens, r.output_tokens, r.offset_s) for r in unique.requests]
    ids = [_ids(tok, r.prompt) for r in unique.requests]
    assert all(_common_prefix(a, b) == 0 for i, a in enumerate(ids) for b in ids[i + 1:])
    assert shared.header["sharing"]["reuse_ceiling"] > 0 == unique.header["sharing"]["reuse_ceiling"]
    assert unique.header["paired_with"] == "trace"


def test_reuse_ceiling_counts_leading_blocks_seen_before():
    rows = [TraceRow(1, 0, 30, 1, (1, 2)), TraceRow(2, 1, 40, 1, (1, 2, 3)), TraceRow(3, 2, 20, 1, (1, 9))]
    # row 2 reuses block 1 (16) and the 14 tokens of block 2 row 1 had, then stops; row 3 reuses block 1 only
    got = sharing(rows, 16)
    assert got["reusable_tokens"] == 16 + 14 + 16 and got["prompt_tokens"] == 90 and got["distinct_blocks"] == 4
    assert got["reuse_ceiling"] == round(46 / 90, 6)


def test_time_scale_window_and_max_requests_slice_the_trace(tokenizer_dir, tmp_path):
    w = _mooncake(tokenizer_dir, tmp_path, time_scale=0.5, window="0.4:4", max_requests=2)
    assert [r.offset_s for r in w.requests] == [0.0, 0.5]  # rows 1 and 2, from 0, at half the trace's gaps
    assert [r.hash_ids for r in w.requests] == [(10, 11, 13), (20, 21)]
    assert w.header["generator"]["window"] == "0.4:4" and "trace_block_tokens" not in w.header["generator"]


def test_azure_and_burstgpt_csv(tokenizer_dir, tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,40,5\n"
                     "2023-11-16 18:15:47.1805900,25,7\n")
    w = make_workload("trace", Common(arrival=Arrival("trace")), {"trace": str(azure), "trace_format": "azure"},
                      tokenizer_dir)
    assert [(r.offset_s, r.input_tokens, r.output_tokens) for r in w.requests] == [(0.0, 40, 5), (0.5, 25, 7)]
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,30,10,40,Conversation log\n6,GPT-4,20,4,24,Conversation log\n"
                     "7,ChatGPT,12,0,12,API log\n9,ChatGPT,15,3,18,API log\n")
    w = make_workload("trace", Common(arrival=Arrival("trace")),
                      {"trace": str(burst), "trace_format": "burstgpt", "trace_filter": "Model=ChatGPT"}, tokenizer_dir)
    assert [(r.offset_s, r.input_tokens) for r in w.requests] == [(0.0, 30), (4.0, 15)]
    assert w.header["trace_rows_skipped"] == 1  # the failed request with 0 response tokens


BAD = [
    ("mooncake", [{"timestamp": 0, "input_length": 10, "output_length": 2}], ":1: no hash_ids"),
    ("mooncake", [{"timestamp": 0, "input_length": -5, "output_length": 2, "hash_ids": []}], ":1: input_length -5"),
    ("mooncake", [MOONCAKE[1], MOONCAKE[0]], ":2: timestamp goes back in time"),
    ("mooncake", [{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}], ":1: 3 hash ids"),
    ("mooncake", [{**MOONCAKE[0], "user": 3}], ":1: unknown field 'user'"),
]


@pytest.mark.parametrize("fmt, rows, message", BAD)
def test_malformed_rows_name_file_and_line_and_write_nothing(tokenizer_dir, tmp_path, capsys, fmt, rows, message):
    trace = _jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "w.jsonl"
    code = main(["workload", "make", "trace", "--trace", trace, "--trace-format", fmt, "--arrival", "trace",
                 "--tokenizer", str(tokenizer_dir), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and f"{trace}{message}" in err and len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("text, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n1,2,3,4\n", ":1: unknown column 'Extra'"),
    ("TIMESTAMP,ContextTokens\n1,2\n", ":1: no column 'GeneratedTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n0,2,3\n", ":3: timestamp goes back"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,x,3\n", ":2: ContextTokens 'x' is not a number"),
])
def test_malformed_azure_rows(tmp_path, tokenizer_dir, text, message):
    path = tmp_path / "a.csv"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        make_workload("trace", Common(arrival=Arrival("trace")), {"trace": str(path), "trace_format": "azure"},
                      tokenizer_dir)


def test_cli_make_and_show_report_the_sharing_structure(tokenizer_dir, tmp_path, capsys):
    trace = _jsonl(tmp_path / "mooncake.jsonl", MOONCAKE)
    out = tmp_path / "w.jsonl"
    assert main(["workload", "make", "trace", "--trace", trace, "--trace-format", "mooncake", "--block-tokens", "16",
                 "--seed", "3", "--arrival", "trace", "--tokenizer", str(tokenizer_dir), "-o", str(out)]) == 0
    again = write_workload(tmp_path / "again.jsonl", _mooncake(tokenizer_dir, tmp_path, kind="trace"))
    assert again.read_bytes() == out.read_bytes()  # the CLI and the API make the same file
    capsys.readouterr()
    assert main(["workload", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    ceiling = load_workload(out).header["sharing"]["reuse_ceiling"]
    assert f"reuse ceiling {ceiling:.4f}" in shown and "distinct blocks 7 of 16 tokens" in shown
    assert "arrival rate 1 requests/s over 3 s" in shown


def test_the_trace_command_docs_measurement_shows_runs_as_written_replaying_the_traces_own_timestamps(
        tokenizer_dir, tmp_path, repo_root):
    shown = "infkit workload make trace --trace FILE --trace-format F"
    assert f"`{shown}`" in (repo_root / "docs" / "measurement.md").read_text()
    trace, out = repo_root / "docs" / "workloads" / "mooncake-slice.jsonl", tmp_path / "w.jsonl"
    words = shown.split()[1:]
    words[words.index("FILE")], words[words.index("F")] = str(trace), "mooncake"
    assert main([*words, "--tokenizer", str(tokenizer_dir), "-o", str(out)]) == 0  # no --arrival needed
    header = load_workload(out).header
    assert header["arrival"]["process"] == "trace"
