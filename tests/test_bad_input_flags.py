"""Flags and identifiers are checked before the first request, with the rule the result is held to.

Against a live fake server: a bad flag is a one-line error, the server sees no request, and no
run directory is created — no measurement is lost to a check that only fails when the result is
written. ``workload make`` likewise refuses its flags before the tokenizer is looked at.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit
from fake_openai_server import FakeConfig, FakeOpenAIServer

WORKLOAD = Path(__file__).parent / "examples" / "valid" / "workload-header.jsonl"

RUN_FLAGS = {
    "timeout-nan": (["--timeout", "nan"], "--timeout: 'nan' is not a finite number"),
    "timeout-inf": (["--timeout", "inf"], "--timeout: 'inf' is not a finite number"),
    "timeout-negative": (["--timeout", "-1"], "--timeout -1.0"),
    "slo-nan": (["--slo", "ttft_ms=nan"], "--slo ttft_ms=nan: an SLO is a finite number of milliseconds > 0"),
    "slo-negative": (["--slo", "ttft_ms=-5"], "--slo ttft_ms=-5.0"),
    "slo-unknown-key": (["--slo", "speed=5"], "--slo 'speed=5': use KEY=MS"),
    "run-id-path": (["--run-id", "../../evil"], "--run-id: '../../evil' does not match"),
    "semantic-id-spaces": (["--semantic-id", "not valid"], "--semantic-id: 'not valid' does not match"),
    "run-label-empty": (["--run-label", ""], "--run-label: '' should be non-empty"),
    "run-label-undecodable": (
        ["--run-label", "caf\udce9"],
        "lone UTF-16 surrogate (not encodable as UTF-8) at /run_label",
    ),
    "profile-id-unknown": (["--profile-id", "INF-NOPE"], "--profile-id: 'INF-NOPE' is not one of"),
    "backend-version-empty": (["--backend-version", ""], "--backend-version: '' should be non-empty"),
    "max-concurrency-zero": (["--max-concurrency", "0"], "--max-concurrency 0: must be >= 1"),
    "max-concurrency-huge": (["--max-concurrency", "9" * 45], "an integer of more than 40 digits at /max_concurrency"),
    "client-workers-zero": (["--client-workers", "0"], "--client-workers 0: must be >= 1"),
    "send-lag-nan": (["--max-send-lag-ms", "nan"], "--max-send-lag-ms nan"),
    "loop-lag-negative": (["--max-loop-lag-ms", "-4"], "--max-loop-lag-ms -4.0"),
    "metrics-url-not-http": (["--metrics-url", "ftp://x"], "--metrics-url 'ftp://x'"),
    "server-pid-gone": (["--server-pid", "0"], "--server-pid 0: no such process"),
    "usd-per-gpu-hour-nan": (["--usd-per-gpu-hour", "nan"], "--usd-per-gpu-hour: 'nan' is not a finite number"),
    "usd-per-gpu-hour-negative": (["--usd-per-gpu-hour", "-2"], "--usd-per-gpu-hour -2.0"),
    "gpu-not-a-device": (["--gpu", "first"], "--gpu 'first': 'first' is not a GPU index or MIG instance"),
}


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeConfig(ttft_s=0.001, gap_s=0.001)) as srv:
        yield srv


@pytest.mark.parametrize("case", sorted(RUN_FLAGS))
def test_run_refuses_each_flag_before_the_first_request(server, tmp_path, case):
    flags, expected = RUN_FLAGS[case]
    before = server.state.requests
    out = tmp_path / "run"
    proc = infkit(
        "run", "--endpoint", server.url, "--model", "fake", "--workload", str(WORKLOAD), "--out", str(out), *flags
    )
    assert_clean_error(proc, expected)
    assert server.state.requests == before, "a request was sent before the flag was refused"
    assert_nothing_left(out)


def test_the_same_run_with_good_flags_measures(server, tmp_path):
    out = tmp_path / "run"
    proc = infkit(
        "run",
        "--endpoint",
        server.url,
        "--model",
        "fake",
        "--workload",
        str(WORKLOAD),
        "--out",
        str(out),
        "--timeout",
        "30",
        "--slo",
        "ttft_ms=500",
        "--run-id",
        "r-1.a",
        "--semantic-id",
        "INF-X-2",
        "--max-send-lag-ms",
        "100000",
        "--max-loop-lag-ms",
        "100000",
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "result.json").is_file() and len((out / "requests.jsonl").read_text().splitlines()) == 2


MAKE = ["workload", "make", "random", "--requests", "3", "--input-tokens", "8", "--output-tokens", "4"]
MAKE_FLAGS = {
    "rate-inf": (["--arrival", "poisson", "--rate", "inf"], "--rate inf: must be a finite number > 0"),
    "rate-nan": (["--arrival", "poisson", "--rate", "nan"], "--rate nan"),
    "rate-negative": (["--arrival", "constant", "--rate", "-2"], "--rate -2.0"),
    "rate-on-closed-loop-inf": (["--arrival", "closed", "--concurrency", "2", "--rate", "inf"], "--rate inf"),
    "burstiness-inf": (["--arrival", "gamma", "--rate", "1", "--burstiness", "inf"], "--burstiness inf"),
    "concurrency-zero": (["--arrival", "closed", "--concurrency", "0"], "--concurrency 0"),
    "range-nan": (["--arrival", "closed", "--concurrency", "1", "--input-range", "nan"], "--input-range nan"),
    "requests-huge": (
        ["--arrival", "closed", "--concurrency", "1", "--requests", "99999999999"],
        "--requests 99999999999: must be in [1, 1000000]",
    ),
    "tokens-huge": (
        ["--arrival", "closed", "--concurrency", "1", "--output-tokens", "99999999999"],
        "--output-tokens 99999999999",
    ),
    "seed-huge": (["--arrival", "closed", "--concurrency", "1", "--seed", "9" * 30], "must be within +-2**64"),
}


@pytest.mark.parametrize("case", sorted(MAKE_FLAGS))
def test_workload_make_refuses_each_flag_before_the_tokenizer(tmp_path, case):
    flags, expected = MAKE_FLAGS[case]
    out = tmp_path / "w.jsonl"
    proc = infkit(*MAKE, "--tokenizer", str(tmp_path / "no-tokenizer"), "-o", str(out), *flags)
    assert_clean_error(proc, expected)
    assert_nothing_left(out)


@pytest.mark.parametrize(
    "kind, flags, expected",
    [
        ("shared-prefix", ["--groups", "0"], "--groups 0: must be in [1, 10000000]"),
        ("shared-prefix", ["--groups", "100000", "--prompts-per-group", "100000"], "10000000000 requests; at most"),
        ("multi-turn", ["--conversations", "2", "--turns", "2", "--requests", "3"], "--requests 3 disagrees"),
        ("long-context", ["--requests", "1", "--context-tokens", "0"], "--context-tokens 0"),
    ],
)
def test_kind_options_are_checked_before_the_tokenizer(tmp_path, kind, flags, expected):
    out = tmp_path / "w.jsonl"
    proc = infkit(
        "workload",
        "make",
        kind,
        "--arrival",
        "closed",
        "--concurrency",
        "1",
        "--tokenizer",
        str(tmp_path / "no-tokenizer"),
        "-o",
        str(out),
        *flags,
    )
    assert_clean_error(proc, expected)
    assert_nothing_left(out)
