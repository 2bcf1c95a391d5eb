"""serving.measure end to end against the fake server: timings, files, server metrics, crashes, validity."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.cli import main
from harness.client import read_records
from harness.contract import validate_file
from harness.errors import InvalidInput
from harness.serving.measure import MeasureConfig, measure
from harness.serving.validity import ValidityLimits
from harness.workload import Arrival, Common, make_workload, write_workload

TTFT_S, GAP_S, OUT_TOKENS = 0.05, 0.01, 8



@pytest.fixture(scope="module")
def workloads(tokenizer_dir, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("workloads")
    closed = Arrival("closed", concurrency=4)
    return {
        "shared": write_workload(d / "shared.jsonl", make_workload(
            "shared-prefix", Common(arrival=closed, output_tokens=OUT_TOKENS),
            {"groups": 2, "prompts_per_group": 8, "prefix_tokens": 64, "suffix_tokens": 8}, tokenizer_dir)),
        "poisson": write_workload(d / "poisson.jsonl", make_workload(
            "random", Common(arrival=Arrival("poisson", rate_rps=40.0), requests=24, input_tokens=16,
                             output_tokens=OUT_TOKENS), {}, tokenizer_dir)),
        "chat": write_workload(d / "chat.jsonl", make_workload(
            "multi-turn", Common(arrival=closed, input_tokens=8, output_tokens=4), {"conversations": 2, "turns": 2},
            tokenizer_dir)),
    }


def _cfg(srv: FakeOpenAIServer, workload: Path, out: Path, **kw) -> MeasureConfig:
    return MeasureConfig(
        endpoint=srv.url,
        model="fake",
        workload_path=workload,
        out_dir=out,
        semantic_id="INF-PREFIX-CACHE",
        run_label="shared-prefix/test",
        **kw,
    )


def test_reproduces_injected_ttft_and_tpot(workloads, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=TTFT_S, gap_s=GAP_S, queue_s=0.003)) as srv:
        out = measure(_cfg(srv, workloads["shared"], tmp_path, slo={"ttft_ms": 500}))
    perf = out.result["performance"]
    assert 50.0 <= perf["ttft_ms"]["p50"] <= 65.0, perf["ttft_ms"]
    assert perf["tpot_ms"]["mean"] == pytest.approx(10.0, abs=1.5)
    assert perf["e2e_ms"]["p50"] == pytest.approx(1e3 * (TTFT_S + (OUT_TOKENS - 1) * GAP_S), abs=15.0)
    assert perf["throughput"]["goodput_rps"] == perf["throughput"]["request_rate_rps"]
    assert perf["queue_wait_server_ms"]["n"] == 16 and perf["queue_wait_server_ms"]["mean"] == pytest.approx(3.0)
    assert validate_file(out.result_path) == []
    assert len(out.requests_path.read_text().splitlines()) == 16
    assert out.metrics_before_path.read_text().startswith("# HELP") and out.metrics_after_path.exists()
    doc = out.result
    assert doc["identity"]["workload_id"] == json.loads(workloads["shared"].read_text().splitlines()[0])["workload_id"]
    assert doc["workload"]["concurrency"] == 4 and doc["workload"]["arrival"] == {"process": "closed"}
    assert doc["correctness"]["termination_counts"] == {"length": 16}
    assert (
        doc["correctness"]["output_tokens_reported"] == doc["correctness"]["output_tokens_requested"] == 16 * OUT_TOKENS
    )
    assert doc["conclusion"]["valid"] is True and doc["conclusion"]["decision"] == "inconclusive"
    hit = doc["details"]["server_metrics"]["prefix_cache"]
    # 2 groups x 8 prompts with a 64-token prefix: the fake's 16-word blocks hit 64 of 72 words after each group's first
    assert hit["hits"] == 14 * 64 and hit["queries"] == 16 * 72


def test_timed_schedule_and_peak_memory(workloads, tmp_path):
    calls = iter(range(100, 10_000, 100))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        out = measure(_cfg(srv, workloads["poisson"], tmp_path, memory_probe=lambda: next(calls)))
    doc = out.result
    assert doc["workload"]["arrival"] == {"process": "poisson", "rate_rps": 40.0}
    assert doc["workload"]["concurrency"] is None and "concurrency" in doc["workload"]["null_reasons"]
    assert doc["details"]["client"]["rate_fraction"] >= 0.95
    assert (
        doc["performance"]["peak_memory_bytes"] >= 200
        and doc["performance"]["peak_memory_source"] == "rss_process_tree"
    )
    recs = read_records(out.requests_path)
    offsets = [json.loads(line)["offset_s"] for line in workloads["poisson"].read_text().splitlines()[1:]]
    assert all(r.sent_s >= off - 0.002 for r, off in zip(recs, offsets, strict=False))  # nothing goes out early


def test_server_crash_keeps_completed_records_and_says_so(workloads, tmp_path):
    refine = lambda f: dataclasses.replace(f, log_tail="engine died")  # noqa: E731
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.005, crash_after=6)) as srv:
        out = measure(_cfg(srv, workloads["shared"], tmp_path, timeout_s=5, failure_refiner=refine))
    doc = out.result
    counts = doc["correctness"]["termination_counts"]
    assert sum(counts.values()) == 16 and 2 <= counts["length"] <= 6
    assert validate_file(out.result_path) == []
    failure = doc["conclusion"]["failure"]
    assert failure["kind"] == "server_crash" and failure["log_tail"] == "engine died"
    assert doc["conclusion"]["valid"] is False and doc["conclusion"]["decision"] == "blocked"
    assert any("did not complete" in r for r in doc["conclusion"]["invalid_reasons"])
    completed = [r for r in read_records(out.requests_path) if r.completed]
    assert len(completed) == counts["length"] and all(r.completion_tokens == OUT_TOKENS for r in completed)


def test_errors_without_crash_are_invalid_but_not_a_failure(workloads, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, fail_every=4)) as srv:
        doc = measure(_cfg(srv, workloads["shared"], tmp_path)).result
    assert doc["correctness"]["termination_counts"] == {"length": 12, "error": 4}
    assert doc["conclusion"]["failure"] is None and doc["conclusion"]["valid"] is False


def test_client_bottleneck_makes_the_run_invalid(workloads, tmp_path, monkeypatch):
    # a client whose loop never ran on time: every probe interval kept as a stall, and every stall judged
    from harness.client import runner

    def note(self, due: float, woke: float) -> None:
        self.stalls.append((due - runner.LAG_PROBE_INTERVAL_S - self.t0, woke - self.t0))

    monkeypatch.setattr(runner._LagMonitor, "note", note)
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001)) as srv:
        doc = measure(
            _cfg(
                srv,
                workloads["shared"],
                tmp_path,
                validity=ValidityLimits(loop_lag_p99_ms=-1.0, lag_fraction=0.0, min_lag_samples=0),
            )
        ).result
    assert doc["conclusion"]["valid"] is False
    stalls = doc["details"]["client"]["stalls"]
    assert stalls["recorded"] and stalls["stalls_judged"] > 0 and not any(stalls["valid_for"].values())
    assert any(r.startswith("client stalls (or late sends) moved the time to first token of")
               for r in doc["conclusion"]["invalid_reasons"])
    assert doc["conclusion"]["excluded_work"]["count"] == doc["workload"]["request_count"]


def test_chat_api_greedy_agreement_and_sglang_metrics(workloads, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, metrics="sglang")) as srv:
        first = measure(_cfg(srv, workloads["chat"], tmp_path / "a", api="chat"))
        second = measure(_cfg(srv, workloads["chat"], tmp_path / "b", api="chat", reference_path=first.requests_path))
    quality = second.result["correctness"]["quality"]
    assert quality["metric"] == "greedy_agreement" and quality["value"] == 1.0 and quality["passed"] is True
    server = second.result["details"]["server_metrics"]
    assert server["prefix_cache"]["series"][0] == "sglang:cached_tokens_total"
    assert second.result["performance"]["queue_wait_server_ms"] is None
    assert "sglang:queue_time_seconds" in second.result["performance"]["null_reasons"]["queue_wait_server_ms"]


def test_no_metrics_endpoint_is_absent_not_zero(workloads, tmp_path):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, metrics=None)) as srv:
        out = measure(_cfg(srv, workloads["shared"], tmp_path))
    server = out.result["details"]["server_metrics"]
    assert out.metrics_before_path is None and server["prefix_cache"] is None
    assert "no /metrics snapshot" in server["absent"]["prefix_cache"]
    assert validate_file(out.result_path) == []


def test_bad_config_is_invalid_input(workloads, tmp_path):
    with pytest.raises(InvalidInput, match="--api chat"):
        measure(
            MeasureConfig(endpoint="http://127.0.0.1:9", model="m", workload_path=workloads["chat"], out_dir=tmp_path)
        )
    with pytest.raises(InvalidInput, match="base URL"):
        measure(
            MeasureConfig(endpoint="localhost:8000", model="m", workload_path=workloads["shared"], out_dir=tmp_path)
        )
    with pytest.raises(InvalidInput, match="unknown SLO"):
        measure(
            MeasureConfig(
                endpoint="http://127.0.0.1:9",
                model="m",
                workload_path=workloads["shared"],
                out_dir=tmp_path,
                slo={"latency": 1},
            )
        )


def test_cli_run(workloads, tmp_path, capsys):
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        code = main(
            [
                "run",
                "--endpoint",
                srv.url,
                "--model",
                "fake",
                "--workload",
                str(workloads["shared"]),
                "--out",
                str(tmp_path),
                "--slo",
                "ttft_ms=200",
            ]
        )
    out = capsys.readouterr().out
    assert code == 0 and "VALID" in out and "ttft_ms" in out and "prefix-cache hit rate" in out
    first = (tmp_path / "summary.txt").read_text().splitlines()[0]
    assert first.endswith(" evidence, VALID)") and ": INCONCLUSIVE (" in first or ": ADOPT (" not in first
    assert validate_file(tmp_path / "result.json") == []
    assert (
        main(
            [
                "run",
                "--endpoint",
                "http://x",
                "--model",
                "m",
                "--workload",
                str(workloads["shared"]),
                "--out",
                str(tmp_path),
                "--slo",
                "oops",
            ]
        )
        == 1
    )
    assert "KEY=MS" in capsys.readouterr().err


def test_cli_bad_paths_and_dead_endpoint_are_one_line_errors(workloads, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    cases = [
        (["--workload", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "a")], "no such file"),
        (["--workload", str(workloads["shared"]), "--out", str(tmp_path / "file" / "x")], "is a file, not a folder"),
        (["--workload", str(workloads["shared"]), "--out", str(tmp_path / "b")], "does not answer"),
    ]
    for argv, message in cases:
        assert main(["run", "--endpoint", "http://127.0.0.1:9", "--model", "m", *argv]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_concurrency_cap_counts_as_client_queue_wait_not_send_lag(workloads, tmp_path):
    # 24 requests at 40/s but at most 2 in flight, each ~80 ms: requests queue behind the cap.
    with FakeOpenAIServer(FakeConfig(ttft_s=0.03, gap_s=0.007)) as srv:
        out = measure(_cfg(srv, workloads["poisson"], tmp_path, max_concurrency=2))
    doc = out.result
    assert doc["workload"]["concurrency"] == 2
    waited = [r for r in out.records if r.slot_s is not None]
    assert len(waited) >= 10
    assert doc["performance"]["queue_wait_client_ms"]["max"] > 100.0  # waiting for a slot is client queue wait
    assert doc["details"]["client"]["send_lag_p99_ms"] < 20.0  # ... but not lateness of the client
    assert max(r.sent_s - r.slot_s for r in waited) < 0.02
