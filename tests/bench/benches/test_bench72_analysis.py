"""bench-72's pieces with hand-computed values: candidates, the KV pool mapping and the GPU launch
commands (no GPU needed), SLOs, probe verdicts, the decision record, and bad flags."""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from harness.backends import BackendConfig, get_backend
from harness.bench.analysis import ClaimResult
from harness.bench.benches import bench72
from harness.bench.benches.bench72.candidates import (
    GIB,
    KVPoolMapping,
    cpu_candidates,
    effective_settings,
    gpu_candidates,
    parameter_count,
)
from harness.bench.benches.bench72.capacity import Campaign, Searched, verdict
from harness.bench.benches.bench72.decision import decide, numerics_gates
from harness.bench.benches.bench72.gate import agreement, changes_numerics, prefix_share, reference_of
from harness.bench.benches.bench72.slo import SLO, LightLoad, cited_light_load, scaled_slo
from harness.bench.lib import gpuload
from harness.bench.lib.capacity_fit import Estimate
from harness.bench.lib.search import Capacity, Probe
from harness.bench.metrics import TTFT_P99
from harness.bench.placement import Placement
from harness.bench.records import ArmRun
from harness.bench.spec import Claim, History
from harness.client.records import RequestRecord
from harness.contract import Effect
from harness.errors import InvalidInput
from harness.models import PreparedModel
from harness.workload.arrival import offsets
from tests.bench_runs import assert_bench_refuses
from tests.typed_results import arm_result, result_with

SMOLLM2_PARAMS = 134_515_008  # SmolLM2-135M's checkpoint, counted from its safetensors header


def test_the_cpu_grid_is_one_factor_at_a_time_around_the_base_or_the_full_product():
    names = [c.name for c in cpu_candidates(("bfloat16", "float32"), (16, 4), (2, 1), full=False)]
    assert names == ["bf16-s16-kv2", "fp32-s16-kv2", "bf16-s4-kv2", "bf16-s16-kv1"]
    assert cpu_candidates(("bfloat16",), (16, 4), (2,), full=False)[1].settings == \
        {"dtype": "bfloat16", "max_num_seqs": 4, "kv_cache_space_gib": 2}
    assert len(cpu_candidates(("bfloat16", "float32"), (16, 4), (2, 1), full=True)) == 8
    assert len(cpu_candidates(("bfloat16", "bfloat16"), (16,), (2,), full=False)) == 1  # repeats fold


def test_the_cpu_grid_centres_on_the_dtype_this_host_serves(monkeypatch):
    monkeypatch.setattr(bench72, "host_isa", lambda: ["avx2", "avx512f", "avx512_bf16"])
    assert bench72.candidate_dtypes(bench72.Config(), "vllm-cpu") == (
        ("bfloat16", "float32"), "candidate dtypes bfloat16, float32: the base bfloat16, as the CPU has native bf16 "
        "(avx512_bf16)")
    # an AVX2-only host serves float32 (bf16 is emulated there): the grid's other dimensions vary around it
    monkeypatch.setattr(bench72, "host_isa", lambda: ["avx2", "fma"])
    dtypes, why = bench72.candidate_dtypes(bench72.Config(), "vllm-cpu")
    assert dtypes == ("float32", "bfloat16") and "no AMX or AVX-512 BF16" in why
    names = [c.name for c in cpu_candidates(dtypes, (16, 4), (2, 1), full=False)]
    assert names == ["fp32-s16-kv2", "bf16-s16-kv2", "fp32-s4-kv2", "fp32-s16-kv1"]
    assert bench72.candidate_dtypes(bench72.Config(dtype="float32"), "vllm-cpu")[0] == ("float32", "bfloat16")
    assert bench72.candidate_dtypes(bench72.Config(dtypes=("bfloat16",)), "vllm-cpu") == (
        ("bfloat16",), "candidate dtypes bfloat16, set by --dtypes")
    assert bench72.candidate_dtypes(bench72.Config(), "vllm")[0] == ("bfloat16",)


def test_the_kv_pool_mapping_gives_both_engines_the_same_pool():
    # An 80 GiB device, SmolLM2 in bf16 (0.2506 GiB), an 8 GiB pool, 2 GiB vLLM activations, 1 GiB in use.
    weights = SMOLLM2_PARAMS * 2
    m = KVPoolMapping(8 * GIB, 80 * GIB, weights, 2 * GIB, 1 * GIB)
    assert m.vllm_utilization() == 0.128  # (8 + 0.2506 + 2) / 80 = 0.12813, rounded down
    assert m.sglang_fraction() == 0.104  # (8 + 0.2506) / 79 = 0.10444, rounded down
    # What each engine then allocates by its own rule (candidates.py docstring): the same pool, to 0.1 GiB.
    vllm_pool = m.vllm_utilization() * 80 * GIB - weights - 2 * GIB
    sglang_pool = m.sglang_fraction() * 79 * GIB - weights
    assert abs(vllm_pool - 8 * GIB) < 0.1 * GIB and abs(sglang_pool - 8 * GIB) < 0.1 * GIB
    with pytest.raises(InvalidInput, match="does not fit this device"):
        KVPoolMapping(79 * GIB, 80 * GIB, weights, 2 * GIB, 1 * GIB).vllm_utilization()


def fake_checkpoint(root: Path, params: int) -> Path:
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "BF16", "shape": [params // 64, 64], "data_offsets": [0, params * 2]}}).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return root


def test_parameter_count_reads_only_the_safetensors_header(tmp_path):
    assert parameter_count(fake_checkpoint(tmp_path, 64 * 1000)) == 64_000
    with pytest.raises(InvalidInput, match="no \\*.safetensors"):
        parameter_count(tmp_path / "missing")


def test_gpu_candidates_launch_with_mapped_memory_settings_and_the_other_knobs():
    cands, mappings = gpu_candidates(("vllm", "sglang"), (256, 64), ("fp8",), dtype="bfloat16", full=False,
                                     params=SMOLLM2_PARAMS, kv_pool_gib=8.0, device_bytes=80 * GIB,
                                     activation_gib=2.0, in_use_gib=1.0)
    assert [c.name for c in cands] == ["vllm-s256", "sglang-s256", "vllm-s64", "vllm-s256-fp8"]
    assert [c.optional for c in cands] == [False, True, False, True]
    base = BackendConfig(model_dir="/models/smollm2", served_model_name="smollm2-135m", port=8000, in_container=True,
                         gpus=(0,))
    argv = {c.name: list(get_backend(c.backend).server_spec(replace(base, **c.settings)).argv) for c in cands}

    def value(name: str, flag: str) -> str:
        return argv[name][argv[name].index(flag) + 1]
    assert value("vllm-s256", "--gpu-memory-utilization") == "0.128" and value("vllm-s256", "--max-num-seqs") == "256"
    assert value("sglang-s256", "--mem-fraction-static") == "0.104"
    assert value("sglang-s256", "--max-running-requests") == "256" and value("sglang-s256", "--dtype") == "bfloat16"
    assert "--gpu-memory-utilization" not in argv["sglang-s256"]
    assert value("vllm-s256-fp8", "--quantization") == "fp8"
    # fp8 weights take half the room, so the same pool needs a smaller share
    assert float(value("vllm-s256-fp8", "--gpu-memory-utilization")) < 0.128
    assert mappings["sglang-s256"]["setting"] == "--mem-fraction-static" and mappings["sglang-s256"]["kv_pool_gib"] == 8
    # vLLM takes the pool itself: every vLLM candidate gets the same exact KV bytes, SGLang has no such flag
    assert {value(n, "--kv-cache-memory-bytes") for n in argv if n.startswith("vllm")} == {str(8 * GIB)}
    assert "--kv-cache-memory-bytes" not in argv["sglang-s256"]
    assert mappings["vllm-s64"]["kv_cache_memory_bytes"] == 8 * GIB
    assert mappings["sglang-s256"]["kv_cache_memory_bytes"] is None


def test_the_gpu_plan_maps_memory_and_runs_one_engine_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(bench72, "resolve_placement", lambda gpu, backend, runtime: Placement("vllm", "docker"))
    monkeypatch.setattr(bench72, "memory_total_bytes", lambda device: 80 * GIB)
    monkeypatch.chdir(tmp_path)
    model = PreparedModel(key="m", name="m", path=fake_checkpoint(tmp_path, SMOLLM2_PARAMS // 64 * 64),
                          gguf_sha256="x", checkpoint_sha256="y", tokenizer_sha256="z")
    plan = bench72.plan(bench72.Config(gpu="0", max_num_seqs_values=(256,), quantizations=(), repeats=3), model)
    assert [(s.name, s.backend) for s in plan.servers] == [("vllm-s256", "vllm"), ("sglang-s256", "sglang")]
    assert [s.settings["gpu_memory_utilization"] for s in plan.servers] == [0.128, 0.104]
    (phase,) = plan.phases
    assert list(phase.still_needed(None)) == [] and "across restarts" in plan.order  # an engine alone on its device
    assert phase.steps.__self__.cfg.schedule_extend_above == bench72.GPU_EXTEND_ABOVE  # a GPU's schedule may grow
    monkeypatch.setattr(bench72, "resolve_placement", lambda gpu, backend, runtime: Placement("vllm-cpu", "local"))
    cpu = bench72.plan(bench72.Config(), model)  # the CPU default: the best so far stays up
    assert len(cpu.servers) == 4 and "on live servers" in cpu.order and cpu.phases[0].keep is not None
    assert cpu.phases[0].steps.__self__.cfg.schedule_extend_above == 0


def test_effective_settings_are_read_from_each_engines_log():
    vllm_cpu = (
        "INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/m', dtype=torch.bfloat16, "
        "max_seq_len=4096\nINFO [kv_cache_utils.py:2327] CPU KV cache size: 93,184 tokens, Maximum concurrency"
    )
    assert effective_settings(vllm_cpu) == {"kv_cache_tokens": 93184, "dtype": "bfloat16"}
    assert effective_settings("GPU KV cache size: 1,234,560 tokens")["kv_cache_tokens"] == 1234560
    sglang = (
        "max_total_num_tokens=412345, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=256"
    )
    assert effective_settings(sglang)["kv_cache_tokens"] == 412345
    assert effective_settings("") == {"kv_cache_tokens": None, "dtype": None}


class Knobs:
    slo_ttft_p99_ms = None
    slo_tpot_p99_ms = None
    slo_ttft_factor = 3.0
    slo_tpot_factor = 2.0
    slo_error_rate = 0.01


def test_a_probe_is_lengthened_so_its_arrivals_span_probe_seconds():
    cfg = bench72.Config(requests=12, probe_seconds=10.0)
    campaign = Campaign(cfg, ("a",), None)
    assert campaign.rate_workload(0.5).common.requests == 12  # 12 requests already span about 24 s
    fast = campaign.rate_workload(6.32).common  # 10 s at 6.32 req/s as scheduled: 64 gaps, 65 requests
    sends = offsets(fast.arrival, fast.requests, fast.seed_for("arrival"))
    assert fast.requests == 65 and (fast.requests - 1) / sends[-1] == pytest.approx(6.32, rel=1e-3)
    assert Campaign(replace(cfg, probe_seconds=0.0), ("a",), None).rate_workload(6.32).common.requests == 12


def test_slos_scale_light_load_figures_and_explicit_limits_win():
    light = LightLoad(ttft_ms=120.0, tpot_ms=20.0, rate_rps=2.0, source="bench-66 light load, m.json")
    slo = scaled_slo(Knobs(), light)
    assert (slo.ttft_p99_ms, slo.tpot_p99_ms, slo.error_rate) == (360.0, 40.0, 0.01)
    assert slo.basis == (
        "P99 TTFT 3 x the light-load median 120.0 ms; P99 TPOT 2 x the light-load median 20.0 ms "
        "(bench-66 light load, m.json)"
    )
    knobs = Knobs()
    knobs.slo_ttft_p99_ms = 500.0
    assert (
        scaled_slo(knobs, light).ttft_p99_ms == 500.0 and "as set (--slo-ttft-p99-ms)" in scaled_slo(knobs, light).basis
    )
    assert scaled_slo(Knobs(), None) is None
    baseline = {
        "light_load": {"offered_rps": 0.8, "latency_ms": {"ttft_ms.p50": 90.0, "tpot_ms.p50": 15.0}},
        "bracket": {"determined": True},
        "saturation": {"offered_rps": 3.2},
    }
    assert cited_light_load(result_with(details={"baseline": baseline}), "src") == (LightLoad(90.0, 15.0, 3.2, "src"),
                                                                                   "")
    assert cited_light_load(result_with(details={}), "src") == (None, "it records no baseline")
    undetermined = {**baseline, "saturation": None,
                    "bracket": {"determined": False, "reason": "invalid levels between"}}
    # too weak to use: never an error, the reason why this bench probes for itself
    assert cited_light_load(result_with(details={"baseline": undetermined}), "src") == (
        None, "its saturation bracket is undetermined (invalid levels between)")
    old = {k: v for k, v in baseline.items() if k != "bracket"}
    light, why = cited_light_load(result_with(details={"baseline": old}), "src")
    assert light is None and why.startswith("that bench-66 run predates the saturation bracket")


def arm_run(ttfts_ms, *, tokens=5, gap_ms=10.0, failed=0, client=()):
    records = []
    for i, ttft in enumerate(ttfts_ms):
        first = 1.0 + ttft / 1e3
        chunks = tuple(first + k * gap_ms / 1e3 for k in range(tokens))
        records.append(
            RequestRecord(
                index=i,
                status="length",
                scheduled_s=1.0,
                sent_s=1.0,
                first_token_s=first,
                end_s=chunks[-1],
                chunk_s=chunks,
                output_tokens_requested=tokens,
                completion_tokens=tokens,
            )
        )
    records += [RequestRecord(index=len(records) + k, status="error", error="500") for k in range(failed)]
    result = {
        "conclusion": {"invalid_reasons": [], "valid": True, "failure": None},
        "details": {"client": {"schedule_reasons": list(client)}, "server_metrics": {}},
        "performance": {"throughput": {"request_rate_rps": 2.0}},
    }
    return ArmRun(label="x", repeat=1, result_path=Path("r.json"), result=arm_result(result),
                  records=tuple(records))


def test_a_probe_verdict_names_every_broken_limit():
    slo = SLO(ttft_p99_ms=150.0, tpot_p99_ms=12.0, error_rate=0.05, basis="")
    ok = verdict(arm_run([100.0] * 19 + [140.0]), slo, 2.0)
    assert ok.passed and ok.violated == () and ok.detail["tpot_p99_ms"] == pytest.approx(10.0)
    assert verdict(arm_run([100.0] * 19 + [200.0]), slo, 2.0).violated == ("TTFT P99",)
    assert verdict(arm_run([100.0] * 20, gap_ms=15.0), slo, 2.0).violated == ("TPOT P99",)
    assert verdict(arm_run([100.0] * 18, failed=2), slo, 2.0).violated == ("error rate",)  # 2 of 20 > 5 %
    late = verdict(arm_run([100.0] * 20, client=("client send lag P99 40 ms > 20 ms",)), slo, 2.0)
    assert not late.passed and late.violated == ("client schedule",)  # a client that fell behind cannot pass
    bound = arm_run([100.0] * 20)
    bound.result.details["client"]["client_reasons"] = ["client-bound here: the client took the engine's cores"]
    assert verdict(bound, slo, 2.0).violated == ("client schedule",)  # nor one that took the engine's CPU


def test_a_p99_limit_is_an_exceedance_count_from_the_scheduled_send():
    slo = SLO(ttft_p99_ms=150.0, tpot_p99_ms=12.0, error_rate=0.05, basis="")
    few = verdict(arm_run([100.0] * 19 + [160.0]), slo, 2.0)
    assert few.violated == ("TTFT P99",) and few.detail["slo_compliance"]["TTFT P99"]["reading"] == "max of 20"
    two = verdict(arm_run([100.0] * 198 + [200.0] * 2), slo, 2.0)  # 1 % of 200 exceed: the P99 limit holds
    judged = two.detail["slo_compliance"]["TTFT P99"]
    assert two.passed and judged["reading"] == "exceedance count" and judged["exceeded"] == 2
    assert judged["exceedance_upper"] > judged["exceedance"] == 0.01  # the binomial bound is stated beside it
    assert verdict(arm_run([100.0] * 197 + [200.0] * 3), slo, 2.0).violated == ("TTFT P99",)
    run = arm_run([100.0] * 20)
    late = replace(run.records[0], scheduled_s=0.9)  # sent 100 ms after its scheduled time: 200 ms from it
    assert verdict(replace(run, records=(late, *run.records[1:])), slo, 2.0).violated == ("TTFT P99",)


def searched(name, cap, low, high, binding=("TTFT P99",)):
    pf = Capacity(capacity_rps=low, upper_rps=high, status="bracketed", probes=6, confirmed=True, rates={})
    est = Estimate(cap, low, high, "crossed" if cap is not None else "below the schedule", "ttft_ms.p99", 500)
    return Searched(name, (Probe(low or 1.0, True),), pf, binding, high, est)


def duel(ci_high, n=3):
    eff = Effect(
        metric="ttft_ms.p99",
        estimator="ratio",
        value=0.8,
        ci_low=0.7,
        ci_high=ci_high,
        confidence=0.95,
        no_effect=1.0,
        better="lower",
        method="m",
        n_pairs=n,
        arm_a="duel b",
        arm_b="duel a",
    )
    decision = "adopt" if ci_high < 1 and n >= 3 else "inconclusive"
    return ClaimResult(
        Claim(TTFT_P99, "duel b", "duel a", name="duel"),
        eff,
        decision,
        "paired" if n >= 3 else "single",
        "r",
        (0.8,) * n,
    )


@pytest.mark.parametrize(
    "a, b, d, decision, evidence, words",
    [
        ((4.4, 4.0, 5.0), (2.5, 2.0, 3.0), duel(0.9), "adopt", "paired", "deploy a"),
        ((4.4, 4.0, 5.0), (3.7, 3.0, 4.5), duel(0.9), "inconclusive", "repeated", "tie: the capacity intervals"),
        ((4.4, 4.0, 5.0), (2.5, 2.0, 3.0), duel(1.1), "inconclusive", "paired", "the paired duel does not confirm"),
        (
            (4.4, 4.0, 5.0),
            (2.5, 2.0, 3.0),
            duel(0.9, n=2),
            "inconclusive",
            "single",
            "the paired duel does not confirm",
        ),
        ((4.4, 4.0, 5.0), (2.5, 2.0, 3.0), None, "inconclusive", "single", "the paired duel did not run"),
    ],
)
def test_a_leader_alone_is_adopted_on_a_confirming_duel_and_a_tie_is_the_decision(a, b, d, decision, evidence, words):
    out = decide([searched("a", *a), searched("b", *b)], d, 4.0, repeats=3, costs={"a": 1.5, "b": 1.2})
    assert (out.decision, out.evidence_level) == (decision, evidence) and words in out.summary
    record = out.record
    tie = "tie" in words
    assert record["deploy"] == ("b" if tie else "a") and record["binding_constraint"] == ["TTFT P99"]
    assert record["tied"] == (["a", "b"] if tie else ["a"])
    if tie:
        assert "b is the cheaper by peak memory GiB" in record["reason"] and out.next_step.startswith("deploy b")


def test_a_cross_start_duel_is_capped_and_says_more_repeats_do_not_lift_it():
    cross = replace(duel(0.9), decision="inconclusive", evidence_level="repeated")
    out = decide([searched("a", 4.4, 4.0, 5.0), searched("b", 2.5, 2.0, 3.0)], cross, 4.0, repeats=5,
                 costs={"a": 1.5, "b": 1.2})
    assert (out.decision, out.evidence_level) == ("inconclusive", "repeated")
    assert out.next_step.startswith("the duel crosses two server starts, so more repeats keep it repeated")


def test_a_candidate_that_fails_the_greedy_gate_is_never_chosen():
    gates = {"b": {"passed": False, "reason": "mean greedy prefix agreement 40% < 90%"}}
    out = decide(
        [searched("b", 4.4, 4.0, 5.0), searched("a", 2.5, 2.0, 3.0)],
        None,
        None,
        repeats=3,
        costs={"a": 1.5, "b": 1.2},
        gates=gates,
    )
    assert out.record["deploy"] == "a" and "gate failed: b" in out.summary and out.decision == "inconclusive"


def _rec(i, text):
    return RequestRecord(index=i, status="length", output_text=text)


def test_greedy_agreement_is_judged_on_the_exact_match_share_with_its_tolerance_stated():
    ref = [_rec(0, "abcdefghij"), _rec(1, "0123456789"), _rec(2, "xx")]
    same = agreement(ref, [_rec(0, "abcdefghij"), _rec(1, "0123456789")], 0.9)
    assert same["passed"] and same["exact_share"] == 1.0 and same["requests"] == 2
    assert (same["metric"], same["min_exact_share"], same["tolerance"]) == ("exact_match_share", 0.9, 0.1)
    half = agreement(ref, [_rec(0, "abcdeXXXXX"), _rec(1, "0123456789")], 0.9)
    assert half["mean_prefix_share"] == 0.75 and not half["passed"] and half["exact_share"] == 0.5
    # a high mean prefix share does not pass: one request in two differs, beyond a 10 % tolerance
    close = agreement(ref, [_rec(0, "abcdefghiX"), _rec(1, "0123456789")], 0.9)
    assert close["mean_prefix_share"] == 0.95 and not close["passed"] and "50.0% of 2 requests < 90%" in close["reason"]
    assert agreement(ref, [_rec(0, "abcdefghiX"), _rec(1, "0123456789")], 0.5)["passed"]
    assert prefix_share("abc", "abcdef") == 1.0 and prefix_share("abc", "") == 0.0
    assert changes_numerics({"dtype": "float32"}, {"dtype": "bfloat16"})
    assert not changes_numerics({"dtype": "float32", "max_num_seqs": 4}, {"dtype": "float32", "max_num_seqs": 16})
    assert changes_numerics({"dtype": "bfloat16", "extra_args": ("--quantization", "fp8")}, {"dtype": "bfloat16"})


def test_the_reference_is_the_highest_precision_served_whatever_the_order():
    assert reference_of({"bf16": {"dtype": "bfloat16"}, "fp32": {"dtype": "float32"}}) == "fp32"
    assert reference_of({"fp16": {"dtype": "half"}, "bf16": {"dtype": "bf16"}}) == "bf16"
    assert reference_of({"q": {"dtype": "float32", "extra_args": ("--quantization", "fp8")},
                         "b": {"dtype": "bfloat16", "extra_args": ()}}) == "b"
    assert reference_of({"a": {"dtype": "float32", "max_num_seqs": 16}, "b": {"dtype": "float32"}}) == "a"


def test_bf16_first_and_fp32_second_fp32_passes_as_the_reference_and_bf16_is_judged_against_it():
    cfg = bench72.Config()
    history = History(cfg=cfg, model=None, run_dir=Path("."))
    history.notes["schedule"] = [0.25, 0.5]
    texts = {"bf16-s16-kv2": ["the cat", "a dog", "one", "two"], "fp32-s16-kv2": ["the cat", "a dot", "one", "tw"]}
    ok = {"conclusion": {"invalid_reasons": [], "valid": True, "failure": None}}
    for name, outs in texts.items():
        history.runs.append(ArmRun(label=f"{name} rate=0.25/s", repeat=1, result_path=Path("r.json"),
                                   result=arm_result(ok),
                                   records=tuple(_rec(i, t) for i, t in enumerate(outs))))
    candidates = cpu_candidates(("bfloat16", "float32"), (16,), (2,), full=False)
    gates = numerics_gates(history, candidates, 0.9)
    fp32, bf16 = gates["fp32-s16-kv2"], gates["bf16-s16-kv2"]
    assert fp32["passed"] and fp32["reference"] == "fp32-s16-kv2" and "the reference (float32)" in fp32["reason"]
    assert bf16["reference"] == "fp32-s16-kv2" and bf16["reference_numerics"] == {"dtype": "float32",
                                                                               "quantization": None}
    assert (bf16["exact_share"], bf16["tolerance"], bf16["passed"]) == (0.5, 0.1, False)
    out = decide([searched("fp32-s16-kv2", 2.5, 2.0, 3.0), searched("bf16-s16-kv2", 4.4, 4.0, 5.0)], None, None,
                 repeats=3, costs={}, gates=gates)
    assert out.record["deploy"] == "fp32-s16-kv2" and "gate failed: bf16-s16-kv2" in out.summary
    assert out.record["gates"]["bf16-s16-kv2"]["reference"] == "fp32-s16-kv2"


def test_a_lone_or_failing_field_is_inconclusive():
    lone = decide([searched("a", 4.4, 4.0, 5.0)], None, None, repeats=3, costs={})
    assert lone.decision == "inconclusive" and "only candidate" in lone.summary
    none = decide([searched("a", None, None, None)], None, None, repeats=3, costs={})
    assert none.decision == "inconclusive" and "no candidate's fitted P99" in none.summary
    # every lowest rate broke a limit: the lowest rate is a bound, not a capacity to deploy up to
    below = [replace(searched(n, 0.72, 0.72, 0.9), estimate=Estimate(0.72, 0.72, 0.9, "below the schedule",
                                                                     "tpot_ms.p99", 250)) for n in ("a", "b")]
    floor = decide(below, None, None, repeats=3, costs={"a": 1.0, "b": 2.0})
    assert floor.decision == "inconclusive" and floor.record["deploy"] is None and "lower START_RPS" in floor.next_step


def test_the_cited_saturation_point_centres_the_schedule_in_this_benchs_request_shape(monkeypatch, tmp_path):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    light = LightLoad(90.0, 15.0, 1.44, "src")
    result = result_with(shape=(132.7, 15.6))
    moved = bench72.in_this_shape(light, result, bench72.Config())
    # 133+16 tokens take 0.341 + 0.540 s idle there, 256+32 tokens 0.656 + 1.115 s: x 0.497
    # ... and its light-load latencies, of 133+16-token requests, are not carried
    assert moved.rate_rps == pytest.approx(1.44 * 0.497, abs=0.002) and (moved.ttft_ms, moved.tpot_ms) == (None, None)
    assert "its saturation point 1.44 req/s x 0.497, a 133+16-token request's idle cost" in moved.source
    assert bench72.in_this_shape(light, None, bench72.Config()) == light  # no result cited: as cited
    same = result_with(shape=(256.2, 32.0))
    assert bench72.in_this_shape(light, same, bench72.Config()) == light  # this bench's shape: as cited
    rate, centre = Campaign(bench72.Config(), ("a",), moved).centre(History(None, None))
    assert rate == 0.716 and centre.startswith("0.716 req/s: src; its saturation point 1.44 req/s x 0.497")
    assert Campaign(bench72.Config(start_rps=2.0), ("a",), moved).centre(History(None, None)) == (
        2.0, "2 req/s, set by --start-rps")
    assert bench72.in_this_shape(None, result, bench72.Config()) is None


def test_on_a_gpu_the_cited_rate_is_carried_by_the_cited_runs_own_rates_or_left_uncarried():
    """The reference host's rates say nothing of a GPU: a GPU run's saturation rate is carried by its own light-load
    prefill (mean prompt / TTFT P50) and decode (1 / TPOT P50), or, where it has none, kept as measured."""
    light = LightLoad(20.0, 5.0, 40.0, "src")
    latency = {"ttft_ms.p50": 20.0, "tpot_ms.p50": 5.0}
    result = result_with(shape=(128.0, 16.0), details={"baseline": {"light_load": {"latency_ms": latency}}})
    moved = bench72.in_this_shape(light, result, bench72.Config(), gpu=True)
    # prefill 128 / 0.020 = 6400 tokens/s, decode 200 tokens/s: (0.02 + 0.075) / (0.04 + 0.155) = 0.487
    assert moved.rate_rps == pytest.approx(40.0 * 0.095 / 0.195, abs=0.002)
    assert "at the cited run's own prefill 6400 and decode 200 tokens/s" in moved.source
    assert "reference host" not in moved.source
    bare = result_with(shape=(128.0, 16.0))
    kept = bench72.in_this_shape(light, bare, bench72.Config(), gpu=True)
    assert kept.rate_rps == 40.0 and "left uncarried" in kept.source and "extends upward" in kept.source


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--growth", "1"], "--growth must be at least 1.1, got 1.0"),
        (["--slo-tier", "gold"], "--slo-tier: 'gold' is not one of"),
        (["--dtypes", "bfloat16,int4"], "--dtypes: 'int4' is not one of"),
        (["--min-rps", "5", "--max-rps", "1"], "--min-rps must be below --max-rps"),
        (["--slo-error-rate", "2"], "--slo-error-rate must be at most 1"),
        (["--baseline", "missing.intoto.json"], "cited manifest missing.intoto.json: no such file"),
        (["--servers-up", "three"], "--servers-up: 'three' is not one of"),
    ],
)
def test_bad_flags_are_one_line_before_any_work(tmp_path, args, expected):
    assert_bench_refuses(tmp_path, "72", args, expected)


def test_make_bench_72_runs_the_bench_with_make_variables():
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        ["make", "-n", "-C", str(root), "bench-72", "SLO_TTFT_P99_MS=800"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "infkit bench 72 --scale 1" in out and "--make-vars 'SLO_TTFT_P99_MS=800'" in out, out


def test_relative_slos_from_a_cited_run_in_other_requests_take_this_benchs_own_light_probe():
    from harness.bench.spec import History

    cfg = bench72.Config(light_requests=8)
    cited = LightLoad(None, None, 0.716, "bench-66 light load, m.json; its saturation point 1.44 req/s x 0.497")
    history = History(cfg=cfg, model=None, run_dir=Path("."))
    campaign = Campaign(cfg, ("a",), cited, "relative")
    assert campaign.slo(history) is None  # nothing to scale from yet
    (step,) = list(campaign.light_steps(history, "a"))
    assert step[1].workload.common.requests == 100  # >= 100 unqueued requests in this bench's shape
    history.notes["light"] = LightLoad(400.0, 60.0, 1.5, "a light-load probe on a: 100 requests one at a time")
    slo = campaign.slo(history)
    assert (slo.ttft_p99_ms, slo.tpot_p99_ms) == (1200.0, 120.0) and "light-load probe" in slo.basis
    # the schedule is still centred on the cited saturation point, not on the one-at-a-time probe's rate
    assert campaign.centre(history) == (0.716, f"0.716 req/s: {cited.source}")
    # an absolute tier needs no probe: the cited rate centres it
    assert list(Campaign(cfg, ("a",), cited, "cpu-server").light_steps(history, "a")) == []


def test_relative_slos_take_a_reference_of_at_least_100_unqueued_requests():
    from harness.bench.spec import History

    cfg = bench72.Config(light_requests=8)
    history = History(cfg=cfg, model=None, run_dir=Path("."))
    for tier, want in (("relative", 100), ("cpu-server", 8)):
        step = next(iter(Campaign(cfg, ("a",), None, tier).light_steps(history, "a")))
        plan = step[1].workload
        assert plan.common.requests == want and plan.common.arrival.concurrency == 1, tier  # one at a time


@pytest.mark.parametrize(("capacities", "min_rps", "expected", "extended"), [
    # the first candidate breaks the foot (0.5): one rung below (0.25) passes, then up until two break in a row;
    # the second, slower, gets the extended schedule from its new foot, breaks it too and adds its own rung below
    ({"a": 0.3, "b": 0.2}, 0.1, {"a": [0.5, 0.25, 1.0], "b": [0.25, 0.125, 0.5]}, [0.25, 0.125]),
    # nothing passes: two rungs below at most, the second clipped to --min-rps
    ({"a": 0.05, "b": 0.05}, 0.2, {"a": [0.5, 0.25, 0.2], "b": [0.2, 0.25]}, [0.25, 0.2]),
    # the foot passes: the schedule stays as it was
    ({"a": 1.0, "b": 0.6}, 0.1, {"a": [0.5, 1.0, 2.0, 4.0], "b": [0.5, 1.0, 2.0]}, []),
])
def test_a_candidate_extends_the_schedule_below_its_broken_foot_for_every_later_candidate(
        monkeypatch, capacities, min_rps, expected, extended):
    from types import SimpleNamespace

    from harness.bench.benches.bench72 import capacity as capacity_mod

    monkeypatch.setattr(capacity_mod, "verdict", lambda run, slo, rate: SimpleNamespace(
        passed=rate <= capacities[run.server]))
    cfg = bench72.Config(start_rps=1.0, min_rps=min_rps, input_tokens=24, output_tokens=6)  # 0.5, 1, 2, 4, 8
    campaign = capacity_mod.Campaign(cfg, ["a", "b"], None, "cpu-server")
    history, ran = probed_in_order(campaign, cfg)
    assert ran == expected
    assert history.notes.get("extended_below", []) == extended
    assert history.notes["schedule"][:len(extended) + 1] == [*reversed(extended), 0.5]
    bound = cfg.schedule_below + cfg.schedule_extend_below + cfg.schedule_above + 1
    assert all(len(rates) <= bound for rates in ran.values())  # inside the progress bound


def test_a_candidate_passing_the_top_extends_the_schedule_upward_until_it_breaks_twice(monkeypatch):
    """A GPU's capacity lies far above a schedule centred on a CPU-sized rate: rungs are added above the top while
    the candidate has not broken twice (at most --schedule-extend-above), and a later candidate gets them too."""
    from types import SimpleNamespace

    from harness.bench.benches.bench72 import capacity as capacity_mod

    capacities = {"a": 50.0, "b": 20.0}
    monkeypatch.setattr(capacity_mod, "verdict", lambda run, slo, rate: SimpleNamespace(
        passed=rate <= capacities[run.server]))
    cfg = bench72.Config(start_rps=1.0, schedule_extend_above=3, input_tokens=24, output_tokens=6)
    campaign = capacity_mod.Campaign(cfg, ["a", "b"], None, "cpu-server")
    history, ran = probed_in_order(campaign, cfg)
    assert history.notes["extended_above"] == [16.0, 32.0, 64.0]  # the budget: 3 rungs above 8
    assert ran["a"] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]  # 64 broke once; no rung left to break twice
    assert ran["b"] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]  # the extended schedule: 32 and 64 broke
    assert campaign.search_config(1.0).max_probes >= len(ran["a"])  # inside the progress bound
    assert capacity_mod.Campaign(replace(cfg, schedule_extend_above=None), ["a"], None, "cpu-server") \
        .cfg.schedule_extend_above is None  # unset here: the plan decides (8 on a GPU, 0 on CPU backends)


def signed_baseline(root: Path, backend: str, version: str, cpu_model: str, run_id: str) -> Path:
    """A signed bench-66 run of ``backend`` serving model ``version`` on a host with ``cpu_model``."""
    from harness.rundir.directory import RunDirectory

    fingerprint = json.loads((Path(__file__).parents[2] / "examples" / "valid" / "fingerprint-no-gpu.json").read_text())
    fingerprint["host"]["cpu_model"] = cpu_model
    rd = RunDirectory.create(root / "runs" / "66", semantic_id="INF-FLOAT-BASELINE", run_label="t", requested={},
                             effective={"backend": backend}, root=root, fingerprint=fingerprint,
                             model={"name": "m", "version": version}, run_id=run_id)
    return rd.finish(summary="t", result=None, evidence_level="precheck", decision="inconclusive").manifest


def test_a_bench66_run_of_another_backend_model_or_device_is_never_cited(tmp_path, monkeypatch):
    """bench-72 centres its schedule on bench-66's saturation point: a run measured on another backend, model or
    host says nothing of this one's capacity (a CPU run's rate would put a GPU's schedule far below its capacity)."""
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    model = PreparedModel(key="m", name="m", path=tmp_path, gguf_sha256="x", checkpoint_sha256="sha256:1",
                          tokenizer_sha256="z")
    here = Placement("vllm-cpu", "local")
    monkeypatch.setattr(gpuload, "host_info", lambda: {"cpu_model": "AMD EPYC 9554"})
    same = signed_baseline(tmp_path, "vllm-cpu", "sha256:1", "AMD EPYC 9554", "20261207T000000Z-a")
    citation, note = bench72.cited_baseline(bench72.Config(), here, model)
    assert citation is not None and citation.manifest == same and note is None
    for n, (backend, version, cpu, why) in enumerate((
            ("vllm", "sha256:1", "AMD EPYC 9554", "it served backend vllm"),
            ("vllm-cpu", "sha256:2", "AMD EPYC 9554", "it served model version sha256:2"),
            ("vllm-cpu", "sha256:1", "Intel Xeon 8480", "it ran on Intel Xeon 8480"))):
        other = signed_baseline(tmp_path, backend, version, cpu, f"20261207T00000{n + 1}Z-b")  # newest: passed over
        citation, note = bench72.cited_baseline(bench72.Config(), here, model)
        assert citation is None and why in note and str(other) in note
        with pytest.raises(InvalidInput, match=f"measured another setup: {why}"):  # named: an input error
            bench72.cited_baseline(bench72.Config(baseline=str(other)), here, model)
    assert bench72.cited_baseline(bench72.Config(baseline=str(same)), here, model)[0].manifest == same


def _probe_run(label: str, rate: float, n: int, ttft_s, seed: int = 0) -> ArmRun:
    """A probe of ``n`` requests scheduled every 1/rate s, TTFT from ``ttft_s(i)``, 4 tokens 0.05 s apart."""
    import numpy as np

    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        sched = i / rate
        first = sched + ttft_s(i) * (1 + 0.05 * rng.random())
        records.append(RequestRecord(index=i, status="length", scheduled_s=sched, sent_s=sched, first_token_s=first,
                                     end_s=first + 0.15, chunk_s=(first, first + 0.05, first + 0.1, first + 0.15),
                                     completion_tokens=4, output_tokens_requested=4))
    result = {"conclusion": {"invalid_reasons": [], "valid": True, "failure": None},
              "details": {"client": {"schedule_reasons": []}, "server_metrics": {}},
              "performance": {"throughput": {"request_rate_rps": rate}}}
    return ArmRun(label=label, repeat=1, result_path=Path("r.json"), result=arm_result(result),
                  records=tuple(records))


def probe_history(runs: dict[str, tuple[str, float]], cfg=None) -> History:
    """A History holding probe runs labelled ``label -> (candidate, rate)`` as the search records them."""
    history = History(cfg=cfg or bench72.Config(slo_ttft_p99_ms=1000.0, slo_tpot_p99_ms=200.0), model=None,
                      run_dir=Path("."))
    history.notes["probes"] = {label: {"candidate": c, "rate_rps": r} for label, (c, r) in runs.items()}
    return history


def test_deploy_up_to_is_the_exceedance_lower_bound_and_a_short_probe_certifies_only_what_it_can():
    from harness.bench.benches.bench72.certify import deploy_text

    history = probe_history({"a rate=1/s": ("a", 1.0), "a rate=2/s": ("a", 2.0), "b rate=1/s": ("b", 1.0)})
    history.runs += [_probe_run("a rate=1/s", 1.0, 400, lambda i: 0.2),
                     # one request in ten over the limit, spread evenly: 10 % exceed, a stationary queue
                     _probe_run("a rate=2/s", 2.0, 400, lambda i: 1.5 if i % 10 == 0 else 0.2),
                     _probe_run("b rate=1/s", 1.0, 12, lambda i: 0.2)]
    campaign = Campaign(history.cfg, ("a", "b"), None, "cpu-server")
    a, b = (campaign.searched(history, n).certified for n in ("a", "b"))
    assert a.lower_rps == 1.0 and a.rates[0].exceeded == 0 and a.rates[0].requests >= 299
    assert a.claim_exceedance == 0.01  # >= 299 steady requests, none over: the P99 claim itself
    assert a.rates[1].exceeded > 0 and a.rates[1].upper > 0.01 and 1.0 <= a.point_rps < 2.0
    # 12 requests and no overloaded probe: queue growth cannot be ruled out, so nothing is certified
    assert b.lower_rps is None and "queue growth not ruled out" in b.status and "needs >= 299" in b.status
    assert deploy_text("a", a) == ("deploy a up to 1 req/s (one-sided lower bound: <= 1.0% of requests over the SLO "
                                   "limits at 95%)")
    out = decide([searched("a", 1.6, 1.4, 1.8), searched("b", 0.9, 0.5, 1.0)], None, None, repeats=3, costs={},
                 certs={"a": a, "b": b})
    assert out.record["deploy_up_to_rps"] == 1.0 and out.record["exceedance"]["b"]["lower_rps"] is None
    assert "299" in out.record["deploy_rule"]


def test_candidates_rank_by_the_certified_lower_bound_before_the_fitted_capacity():
    """b's fitted capacity reads higher, but only a is certified to serve 2 req/s: a leads, and the fitted figure
    orders only candidates certifying the same rate."""
    history = probe_history({f"{c} rate={r:g}/s": (c, r) for c in "ab" for r in (1.0, 2.0, 4.0)})
    # a: 0.9 s at 1 and 2 req/s, under the 1 s limit; overloaded at 4, completing 3 req/s
    # b: 0.2 s at 1 and 2 req/s; overloaded at 4, completing 2 req/s: 2 req/s is its ceiling, never certified
    history.runs += [_probe_run(f"a rate={r:g}/s", r, 400, lambda i: 0.9) for r in (1.0, 2.0)]
    history.runs += [_probe_run("a rate=4/s", 4.0, 400, lambda i: 0.2 + i / 12)]
    history.runs += [_probe_run(f"b rate={r:g}/s", r, 400, lambda i: 0.2) for r in (1.0, 2.0)]
    history.runs += [_probe_run("b rate=4/s", 4.0, 400, lambda i: 0.2 + i / 4)]
    campaign = Campaign(history.cfg, ("a", "b"), None, "cpu-server")
    a, b = (campaign.searched(history, n) for n in ("a", "b"))
    assert (a.lower_rps, b.lower_rps) == (2.0, 1.0)
    assert b.estimate.capacity_rps > a.estimate.capacity_rps  # the fitted P99s alone would put b first
    assert [s.name for s in campaign.ranked(history)] == ["a", "b"]
    out = decide([b, a], None, None, repeats=3, costs={})
    assert out.record["deploy"] == "a" and "a certifies the highest rate (2 req/s)" in out.record["reason"]


def test_a_candidates_probes_too_small_alone_are_judged_for_send_lag_pooled():
    """Probes of 30 sends each are never judged alone (< 50): pooled over the candidate they are, and the probes
    holding a late send fail on their client schedule."""
    history = probe_history({f"a rate={r:g}/s": ("a", r) for r in (1.0, 2.0)})
    history.runs += [_probe_run(f"a rate={r:g}/s", r, 30, lambda i: 0.2) for r in (1.0, 2.0)]
    on_time = Campaign(history.cfg, ("a",), None, "cpu-server").searched(history, "a")
    assert on_time.send_lag["judged"] and on_time.send_lag["sends"] == 60 and all(p.passed for p in on_time.probes)
    late = replace(history.runs[1], records=tuple(replace(r, sent_s=r.scheduled_s + (0.2 if r.index % 5 == 0 else 0))
                                                  for r in history.runs[1].records))
    history.runs[1] = late
    got = Campaign(history.cfg, ("a",), None, "cpu-server").searched(history, "a")
    assert got.probes[0].passed and not got.probes[1].passed and got.probes[1].violated[0] == "client schedule"
    assert "pooled over 2 probes of a > " in got.probes[1].detail["client_reasons"][0]
    from harness.bench.benches.bench72.decision import lag_text

    assert lag_text(got.send_lag).startswith("60 sends, P95 200.0 ms: late (P95 200.0 ms > 25.0 ms)")
    assert lag_text(on_time.send_lag) == "60 sends, P95 0.0 ms: kept the schedule"


def test_the_plan_states_the_claim_the_probe_size_can_make():
    note = bench72.claim_note(bench72.Config())
    assert "a probe of 12 requests at best <= 22.1%" in note and "needs >= 299" in note and "--confirm-s" in note
    assert "(300 s set)" in bench72.claim_note(bench72.Config(confirm_s=300.0))


def test_the_confirming_run_replays_the_deploy_point_and_says_whether_the_claim_held():
    from harness.bench.benches.bench72.certify import confirmation

    history = probe_history({"a rate=1/s": ("a", 1.0)})
    history.runs += [_probe_run("a rate=1/s", 1.0, 400, lambda i: 0.2)]
    campaign = Campaign(replace(history.cfg, confirm_s=600.0), ("a",), None, "cpu-server")
    [(_, arm)] = list(campaign.confirm(history))
    assert arm.label == "confirm a" and arm.server == "a" and history.notes["confirm"]["rate_rps"] == 1.0
    assert arm.workload.common.requests >= 600 and arm.workload.name == "confirm-1"
    assert not list(Campaign(history.cfg, ("a",), None, "cpu-server").confirm(history))  # off by default
    a, slo = campaign.searched(history, "a"), campaign.slo(history)
    held = confirmation(_probe_run("confirm a", 1.0, 600, lambda i: 0.2), slo, a.certified, [])
    assert held["held"] and held["exceeded"] == 0 and "held" in held["text"]
    missed = confirmation(_probe_run("confirm a", 1.0, 600, lambda i: 1.5 if i % 20 == 0 else 0.2), slo,
                          a.certified, [])
    assert not missed["held"] and missed["exceeded"] > 0 and "not held" in missed["text"]


def test_a_probe_whose_queue_grew_fails_even_where_its_p99_reads_under_the_slo():
    slo = SLO(ttft_p99_ms=60_000.0, tpot_p99_ms=200.0, error_rate=0.01, basis="test")
    # 200 requests at 2 req/s, each waiting 0.15 s longer than the one before: 30 % of the load left unserved
    grew = _probe_run("a rate=2/s", 2.0, 200, lambda i: 0.2 + 0.15 * i)
    probe = verdict(grew, slo, 2.0)
    assert not probe.passed and "queue grew" in probe.violated
    flat = verdict(_probe_run("a rate=2/s", 2.0, 200, lambda i: 0.2), slo, 2.0)
    assert flat.passed and "queue grew" not in flat.violated


def probed_in_order(campaign, cfg):
    """Run both candidates' searches as the bench does (the first sets the schedule): the history and each one's
    probed rates in order."""
    from types import SimpleNamespace

    from harness.bench.spec import History

    history = History(cfg=cfg, model=None)
    ran: dict[str, list[float]] = {"a": [], "b": []}
    for name in ("a", "b"):
        for _, arm in campaign.search(history, name, first=name == "a"):
            ran[name].append(history.notes["probes"][arm.label]["rate_rps"])
            history.runs.append(SimpleNamespace(label=arm.label, server=name, failure=None))
    return history, ran
