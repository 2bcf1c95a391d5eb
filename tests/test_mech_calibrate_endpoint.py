"""mech calibrate --endpoint end to end against the in-process fake server (fast).

Drives the live path (workloads from the tokenizer, the serving client, records → fit → prediction)
without a real engine: the fake server's fixed TTFT and token gap must come back as the measured
figures the fit used.
"""

from __future__ import annotations

import json

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.cli import main
from harness.contract import validate_file
from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.mech.calibrate.config import CalibrateConfig
from harness.mech.calibrate.live import make_workloads, plan_trace, record_live
from harness.mech.calibrate.plan import profiling_plan, read_measured
from harness.workload import load_workload

TTFT_S, GAP_S = 0.05, 0.01
SMALL = ["--repeats", "1", "--gap-s", "0.3", "--heldout-requests", "6", "--heldout-rate-rps", "20"]



def test_endpoint_calibration_uses_the_measured_records(tokenizer_dir, tmp_path) -> None:
    with FakeOpenAIServer(FakeConfig(ttft_s=TTFT_S, gap_s=GAP_S)) as srv:
        assert main(["mech", "calibrate", "--endpoint", srv.url, "--served-name", "fake",
                     "--tokenizer", str(tokenizer_dir), *SMALL, "--record-dir", str(tmp_path / "live"),
                     "--out", str(tmp_path / "mech"), "--run-id", "e", "--quiet", "--no-sign"]) == 0
    run_dir = tmp_path / "mech" / "calibrate" / "e"
    result = json.loads((run_dir / "result.json").read_text())
    assert validate_file(run_dir / "result.json") == []
    assert result["kind"] == "mechanism" and result["identity"]["run_label"] == "calibrate/live"
    live = result["details"]["live"]
    assert live["served_model"] == "fake" and live["server"] is None
    assert live["phases"]["profile"]["completed"] == 35 and live["phases"]["heldout"]["completed"] == 6

    heldout = read_measured(run_dir / "heldout_requests.jsonl")
    assert len(heldout) == 6
    for obs in heldout.values():
        assert obs.ttft_ms == pytest.approx(1e3 * TTFT_S, abs=25)
        assert obs.tpot_ms == pytest.approx(1e3 * GAP_S, abs=5)
    comparison = result["details"]["comparison"]
    assert comparison["ttft_ms_p50"]["measured"] == pytest.approx(1e3 * TTFT_S, abs=25)
    assert result["identity"]["tokenizer"]["version"] == sha256_file(tokenizer_dir / "tokenizer.json")
    assert result["identity"]["workload_id"] == load_workload(run_dir / "heldout_workload.jsonl").workload_id


def test_profile_workload_is_the_plan(tokenizer_dir, tmp_path) -> None:
    """The trace workload keeps the plan's order, lengths and send offsets, with exact prompt token counts."""
    cfg = CalibrateConfig(repeats=1, gap_s=0.5)
    plan = profiling_plan(cfg.repeats, cfg.gap_s)
    files = make_workloads(cfg, tokenizer_dir, tmp_path)
    made = load_workload(files["profile"])
    assert [(r.index, r.offset_s, r.input_tokens, r.output_tokens) for r in made.requests] == \
        [(r.index, r.arrival_s, r.input_tokens, r.output_tokens) for r in plan.requests]
    assert len({r.prompt for r in made.requests}) == len(plan.requests)  # no two prompts alike
    assert plan_trace(plan).count("\n") == len(plan.requests)


def test_endpoint_without_a_known_tokenizer_is_refused(tmp_path) -> None:
    with FakeOpenAIServer(FakeConfig()) as srv, pytest.raises(InvalidInput, match="--tokenizer"):
        record_live(CalibrateConfig(endpoint=srv.url, served_name="someone/else", record_dir=str(tmp_path)))
    assert not any(tmp_path.iterdir())
