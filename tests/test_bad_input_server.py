"""Whatever a server sends, every request gets exactly one record and the run's result is written.

Driven by tests/fake_openai_server.py: a usage block that is not sane (NaN, a string, a negative
number, a list, an over-long integer, ``prompt_tokens_details`` as a string, ...) is recorded as
absent with its reason (``server_data_error``) and the request completes as the stream says; a
malformed ``data:`` payload (not JSON, not an object, ``choices`` not a list, invalid UTF-8, ...)
ends its request as ``error`` (docs/measurement.md) without an asyncio traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_helpers import infkit
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.client import read_records
from harness.contract import validate_file
from harness.serving.measure import MeasureConfig, measure

WORKLOAD = Path(__file__).parent / "examples" / "valid" / "workload-header.jsonl"  # 2 requests, 2 tokens each
REQUESTS = 2

USAGE = {  # raw usage value -> what the record's server_data_error says
    "nan": (b'{"prompt_tokens": NaN, "completion_tokens": 2}', "usage.prompt_tokens is number NaN"),
    "infinity": (b'{"prompt_tokens": 4, "completion_tokens": Infinity}', "usage.completion_tokens is number Infinity"),
    "1e999": (b'{"completion_tokens": 1e999}', "usage.completion_tokens is number Infinity"),
    "string": (b'{"completion_tokens": "2"}', 'usage.completion_tokens is string "2"'),
    "negative": (b'{"completion_tokens": -5}', "usage.completion_tokens is number -5"),
    "fraction": (b'{"completion_tokens": 1.5}', "usage.completion_tokens is number 1.5"),
    "boolean": (b'{"completion_tokens": true}', "usage.completion_tokens is boolean true"),
    "list-value": (b'{"completion_tokens": [2]}', "usage.completion_tokens is array [2]"),
    "beyond-sane": (b'{"completion_tokens": 10000000000000}', "not a token count in [0, 1000000000]"),
    "5000-digit": (b'{"completion_tokens": ' + b"9" * 5000 + b"}", "an integer of 5000 digits"),
    "usage-a-list": (b"[1, 2]", "usage is array, not an object"),
    "usage-a-string": (b'"lots"', "usage is string, not an object"),
    "details-a-string": (b'{"completion_tokens": 2, "prompt_tokens_details": "cached"}',
                         "usage.prompt_tokens_details is string, not an object"),
    "cached-negative": (b'{"completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": -1}}',
                        "usage.prompt_tokens_details.cached_tokens is number -1"),
}

CHUNKS = {  # raw data: payload sent mid-stream -> what the record's error says
    "not-json": (b"not json", "data: payload is not JSON"),
    "trailing-data": (b'{"choices": []} {"x": 1}', "extra data after the JSON value"),
    "a-list": (b"[1, 2, 3]", "data: payload is array, not an object"),
    "a-string": (b'"text"', "data: payload is string, not an object"),
    "null": (b"null", "data: payload is null, not an object"),
    "choices-a-string": (b'{"choices": "abc"}', "choices is string, not a list"),
    "choices-an-object": (b'{"choices": {"0": {"text": "x"}}}', "choices is object, not a list"),
    "choice-a-number": (b'{"choices": [5]}', "choices[0] is number, not an object"),
    "text-a-number": (b'{"choices": [{"text": 5}]}', "the choice's text is number, not a string"),
    "finish-reason-a-list": (b'{"choices": [{"text": "x", "finish_reason": ["stop"]}]}', "finish_reason is array"),
    "delta-a-string": (b'{"choices": [{"delta": "x"}]}', "choices[0].delta is string, not an object"),
    "invalid-utf8": (b'{"choices": [{"text": "\xff\xfe"}]}', "data: payload is not UTF-8"),
    "nested-too-deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}


def _measure(config: FakeConfig, out: Path, capfd):
    """Run the example workload against a misbehaving server; check what every case must hold:
    no traceback, exactly one record per request, a schema-valid result written."""
    with FakeOpenAIServer(config) as srv:
        outcome = measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=WORKLOAD, out_dir=out,
                                        timeout_s=10))
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Fatal error" not in err, err[-2000:]
    records = read_records(outcome.requests_path)
    assert [r.index for r in records] == list(range(REQUESTS))
    assert len(outcome.requests_path.read_text().splitlines()) == REQUESTS  # exactly one record each
    assert validate_file(outcome.result_path) == []
    return outcome, records


@pytest.mark.parametrize("case", sorted(USAGE))
def test_insane_usage_is_absent_with_its_reason(tmp_path, capfd, case):
    raw, reason = USAGE[case]
    outcome, records = _measure(FakeConfig(ttft_s=0.001, gap_s=0.001, usage_raw=raw), tmp_path, capfd)
    for rec in records:
        assert rec.status == "length" and reason in rec.server_data_error, rec
        assert rec.completion_tokens is None or "completion_tokens" not in reason
    assert outcome.result["details"]["usage"]["server_data_rejected"] == REQUESTS
    assert outcome.result["correctness"]["termination_counts"] == {"length": REQUESTS}


@pytest.mark.parametrize("case", sorted(CHUNKS))
def test_a_malformed_payload_ends_its_request_as_error(tmp_path, capfd, case):
    raw, message = CHUNKS[case]
    outcome, records = _measure(FakeConfig(ttft_s=0.001, gap_s=0.001, bad_chunk=raw), tmp_path, capfd)
    for rec in records:
        assert rec.status == "error" and rec.error.startswith("malformed stream: ") and message in rec.error, rec
        assert len(rec.chunk_s) == 1  # the token that arrived before the bad payload is kept
    assert outcome.result["correctness"]["termination_counts"] == {"error": REQUESTS}
    assert outcome.result["conclusion"]["valid"] is False


def test_a_lone_surrogate_in_the_text_is_replaced_and_noted(tmp_path, capfd):
    config = FakeConfig(ttft_s=0.001, gap_s=0.001, bad_chunk=b'{"choices": [{"text": "\\ud800"}]}')
    _, records = _measure(config, tmp_path, capfd)
    for rec in records:
        assert rec.status == "length" and "\ufffd" in rec.output_text
        assert "lone UTF-16 surrogates, replaced by U+FFFD" in rec.server_data_error


def test_non_finite_server_metrics_are_absent_not_fatal(tmp_path, capfd):
    metrics = ("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc NaN\n"
               "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total +Inf\n")
    outcome, _ = _measure(FakeConfig(ttft_s=0.001, gap_s=0.001, metrics_raw=metrics), tmp_path, capfd)
    server = outcome.result["details"]["server_metrics"]
    assert server.get("kv_cache_usage_peak") is None and "kv_cache_usage_peak" in json.dumps(server["absent"])


@pytest.mark.parametrize("config, rc, status", [
    (FakeConfig(ttft_s=0.001, gap_s=0.001, usage_raw=b'{"completion_tokens": NaN, "prompt_tokens_details": "x"}'),
     0, "length"),
    (FakeConfig(ttft_s=0.001, gap_s=0.001, bad_chunk=b'{"choices": "abc"}'), 4, "error"),
])
def test_the_cli_writes_the_result_and_prints_no_traceback(tmp_path, config, rc, status):
    out = tmp_path / "run"
    with FakeOpenAIServer(config) as srv:
        proc = infkit("run", "--endpoint", srv.url, "--model", "fake", "--workload", str(WORKLOAD), "--out", str(out),
                      "--max-send-lag-ms", "100000", "--max-loop-lag-ms", "100000")
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == rc, proc.stderr[-2000:]
    assert validate_file(out / "result.json") == []
    assert [r.status for r in read_records(out / "requests.jsonl")] == [status] * REQUESTS
