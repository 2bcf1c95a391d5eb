"""bench-69's parts without a server: placement, config checks, comparison, control veto, outputs."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.client import RequestRecord
from harness.contract.result import check_result
from harness.errors import InvalidInput
from harness.experiments import bench69
from harness.experiments.bench69 import (
    ARM_CONTROL,
    ARM_SHARED,
    ARM_UNIQUE,
    Bench69Config,
    resolve_placement,
)
from harness.experiments.bench_outputs import arm_rows, summary_text
from harness.experiments.paired import (
    ArmRun,
    Protocol,
    build_comparison,
    effect_of,
    interleaved,
    run_schedule,
)
from harness.experiments.serving_arm import kv_cache_config, ttft_samples_ms
from harness.report.plots import cdf_png

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "valid"
SERVING = json.loads((EXAMPLES / "serving-single.json").read_text())
CRASHED = json.loads((EXAMPLES / "serving-failed-blocked.json").read_text())


def arm_run(label: str, repeat: int, center_ms: float, *, doc=SERVING, hit=None) -> ArmRun:
    rng = np.random.default_rng(repeat * 100 + int(center_ms))
    samples = tuple(float(v) for v in center_ms * (1 + 0.05 * rng.standard_normal(8)))
    result = copy.deepcopy(doc)
    result["identity"]["run_label"] = label
    return ArmRun(label=label, repeat=repeat, result_path=Path(f"arms/{label}/r{repeat}/result.json"),
                  result=result, samples_ms=samples, hit_rate=hit, server="cache-on")


def comparison(runs, repeats=3):
    protocol = Protocol(repeats=repeats, warmup_requests=2)
    return build_comparison(runs, arm_a=ARM_UNIQUE, arm_b=ARM_SHARED, semantic_id="INF-PREFIX-CACHE",
                            run_id="20261130T080000Z-abc123", protocol=protocol, seed=0,
                            next_steps=bench69.NEXT_STEPS, resamples=500)


def test_interleaving_is_a_b_a_b():
    assert interleaved(["A", "B"], 3) == [(1, "A"), (1, "B"), (2, "A"), (2, "B"), (3, "A"), (3, "B")]


def test_three_clear_pairs_adopt_with_paired_evidence():
    runs = [arm_run(label, r, 900 if label == ARM_UNIQUE else 150) for r, label in interleaved([ARM_UNIQUE, ARM_SHARED], 3)]
    doc = comparison(runs)
    concl = doc["conclusion"]
    assert doc["kind"] == "comparison" and concl["evidence_level"] == "paired" and concl["decision"] == "adopt"
    assert concl["effect"]["ci_high"] < 1.0 and concl["effect"]["n_pairs"] == 3
    assert doc["details"]["protocol"]["prefix_cache_reset_before_each_arm_run"] is True
    check_result(doc)


def test_a_crashed_arm_blocks_the_decision_and_keeps_what_completed():
    runs = [arm_run(ARM_UNIQUE, 1, 900), arm_run(ARM_SHARED, 1, 150), arm_run(ARM_UNIQUE, 2, 900, doc=CRASHED)]
    doc = comparison(runs)
    concl = doc["conclusion"]
    assert concl["decision"] == "blocked" and concl["failure"]["kind"] == "server_crash"
    assert concl["valid"] is False and "repeat 2" in concl["invalid_reasons"][0]
    assert concl["effect"]["n_pairs"] == 1  # the completed pair is still reported
    assert doc["correctness"]["termination_counts"]["not_sent"] == 2
    check_result(doc)


def test_run_schedule_stops_at_the_first_failure():
    calls = []

    def run_one(arm, repeat):
        calls.append((arm, repeat))
        return arm_run(arm, repeat, 500, doc=CRASHED if (arm, repeat) == (ARM_SHARED, 1) else SERVING)

    resets = []
    runs = run_schedule(interleaved([ARM_UNIQUE, ARM_SHARED], 3), run_one,
                        before_each=lambda arm, r: resets.append(arm), progress=lambda _: None)
    assert calls == [(ARM_UNIQUE, 1), (ARM_SHARED, 1)] and len(runs) == 2 and resets == [ARM_UNIQUE, ARM_SHARED]


def test_control_with_a_gain_vetoes_adopt():
    runs = [arm_run(label, r, {ARM_UNIQUE: 900, ARM_SHARED: 150, ARM_CONTROL: 300}[label])
            for r, label in interleaved([ARM_UNIQUE, ARM_SHARED, ARM_CONTROL], 3)]
    control = bench69.control_reading(effect_of(runs, ARM_UNIQUE, ARM_CONTROL, seed=1, resamples=500))
    assert control["shows_gain"] is True
    doc = bench69.apply_control_veto(comparison(runs), control)
    assert doc["conclusion"]["decision"] == "inconclusive" and "vetoed" in doc["conclusion"]["summary"]


def test_control_without_gain_reads_as_expected():
    runs = [arm_run(label, r, {ARM_UNIQUE: 900, ARM_CONTROL: 890}[label])
            for r, label in interleaved([ARM_UNIQUE, ARM_CONTROL], 3)]
    control = bench69.control_reading(effect_of(runs, ARM_UNIQUE, ARM_CONTROL, seed=1, resamples=500))
    assert control["shows_gain"] is False and control["reading"] == "no gain (as expected)"


def test_gpu_requested_without_gpu_says_so_and_runs_the_cpu_default(monkeypatch):
    monkeypatch.setattr(bench69, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(bench69, "docker_engine_present", lambda: False)
    placement = resolve_placement(Bench69Config(gpu="0"))
    assert (placement.backend, placement.runtime) == ("vllm-cpu", "local")
    assert "GPU=0" in placement.notice and "NVIDIA GPU" in placement.notice and "\n" not in placement.notice


def test_gpu_with_engine_takes_the_container_path(monkeypatch):
    monkeypatch.setattr(bench69, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(bench69, "docker_engine_present", lambda: True)
    placement = resolve_placement(Bench69Config(gpu="0"))
    assert (placement.backend, placement.runtime, placement.notice) == ("vllm", "docker", None)


def test_docker_runtime_without_a_gpu_runs_the_cpu_default_in_its_image(monkeypatch):
    monkeypatch.setattr(bench69, "nvidia_gpu_present", lambda: False)
    placement = resolve_placement(Bench69Config(runtime="docker"))
    assert (placement.backend, placement.runtime) == ("vllm-cpu", "docker")  # the inf-vllm-cpu image
    monkeypatch.setattr(bench69, "nvidia_gpu_present", lambda: True)
    assert resolve_placement(Bench69Config(runtime="docker")).backend == "vllm"


def test_backend_runtime_mismatch_is_an_input_error():
    with pytest.raises(InvalidInput, match="does not run under runtime local"):
        resolve_placement(Bench69Config(runtime="local", backend="vllm"))


@pytest.mark.parametrize("bad", [dict(repeats=0), dict(groups=0), dict(prefix_tokens=4000, suffix_tokens=200)])
def test_config_checks(bad):
    with pytest.raises(InvalidInput):
        Bench69Config(**bad).check()


def test_cli_bad_input_is_one_line_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "harness", "bench", "69", "--repeats", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["infkit bench: error: repeats must be at least 1, got 0"]


def test_ttft_samples_use_completed_records_only():
    records = [RequestRecord(index=0, status="length", sent_s=1.0, first_token_s=1.25),
               RequestRecord(index=1, status="error", sent_s=2.0, first_token_s=2.5),
               RequestRecord(index=2, status="not_sent")]
    assert ttft_samples_ms(records) == pytest.approx([250.0])


def test_kv_cache_config_from_metrics(tmp_path):
    prom = tmp_path / "metrics_before.prom"
    prom.write_text('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="128",'
                    'enable_prefix_caching="True",kv_cache_size_tokens="93184",num_gpu_blocks="728",'
                    'kv_cache_memory_bytes="2147483648"} 1.0\n')
    assert kv_cache_config(prom) == {"kv_cache_size_tokens": 93184, "block_size": 128, "num_gpu_blocks": 728,
                                     "kv_cache_memory_bytes": 2147483648, "enable_prefix_caching": True}
    assert kv_cache_config(tmp_path / "absent.prom") is None


def test_summary_and_plot(tmp_path):
    runs = [arm_run(label, r, 900 if label == ARM_UNIQUE else 150, hit=0.0 if label == ARM_UNIQUE else 0.7)
            for r, label in interleaved([ARM_UNIQUE, ARM_SHARED], 3)]
    doc = comparison(runs)
    doc["details"]["control"] = {"effect": None, "reading": "not run"}
    rows = arm_rows(runs, [ARM_UNIQUE, ARM_SHARED, ARM_CONTROL])
    assert [r[0] for r in rows] == [ARM_UNIQUE, ARM_SHARED] and rows[1][8] == "70%"
    text = summary_text("bench-69", runs, [ARM_UNIQUE, ARM_SHARED], doc, wall_s=12.0)
    assert "adopt" in text and "control: no completed pair" in text and "wall time: 12 s" in text
    png = cdf_png({r.label: r.samples_ms for r in runs}, tmp_path / "cdf.png", title="t", xlabel="ms")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_server_that_did_not_start_blocks_with_the_arms_already_measured():
    from harness.contract import Failure

    runs = [arm_run(label, r, 900 if label == ARM_UNIQUE else 150) for r, label in interleaved([ARM_UNIQUE, ARM_SHARED], 3)]
    protocol = Protocol(repeats=3, warmup_requests=2)
    doc = build_comparison(runs, arm_a=ARM_UNIQUE, arm_b=ARM_SHARED, semantic_id="INF-PREFIX-CACHE",
                           run_id="r1", protocol=protocol, seed=0, next_steps=bench69.NEXT_STEPS, resamples=200,
                           failure=Failure(stage="server_start", kind="server_crash", message="server cache-off: exited"))
    concl = doc["conclusion"]
    assert concl["decision"] == "blocked" and concl["failure"]["stage"] == "server_start"
    assert concl["effect"]["n_pairs"] == 3 and concl["invalid_reasons"] == ["server_start: server_crash"]


def test_images_come_from_the_servers_or_the_native_env():
    vllm = bench69.get_backend("vllm")
    digest = "sha256:" + "ab" * 32
    servers = {"cache-on": {"image": {"ref": "vllm/vllm-openai:v0.11.0", "digest": digest}}, "cache-off": {"image": None}}
    assert bench69._images(vllm, servers) == [{"role": "inf-vllm-011-cu128", "ref": "vllm/vllm-openai:v0.11.0",
                                               "digest": digest}]
    native = bench69._images(vllm, {"cache-on": {"image": None}})
    assert native[0]["native"] is True and native[0]["role"] == "inf-vllm-011-cu128"


def test_an_interrupted_schedule_leaves_the_finished_runs_with_the_caller():
    def run_one(arm, repeat):
        if repeat == 2:
            raise KeyboardInterrupt
        return arm_run(arm, repeat, 500)

    kept: list[ArmRun] = []
    with pytest.raises(KeyboardInterrupt):
        run_schedule(interleaved([ARM_UNIQUE, ARM_SHARED], 3), run_one, progress=lambda _: None, into=kept)
    assert [(r.label, r.repeat) for r in kept] == [(ARM_UNIQUE, 1), (ARM_SHARED, 1)]
