"""The host profile's arithmetic from recorded request timings (no server: the rates are given)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.backends.host_dtype import DtypeChoice
from harness.bench.lib.hostprofile import (
    REFERENCE_START_S,
    BenchLoad,
    HostProfile,
    bench_costs,
    decode_rate,
    default_rate,
    default_size,
    load_scale,
    prefill_rate,
    read_profile,
    reference_request_s,
    start_excess_s,
    write_profile,
)
from harness.client.records import RequestRecord
from harness.commands.doctor import Target, profile_from, report
from harness.workload.arrival import offsets


def rec(i: int, sent: float, first: float, end: float, prompt: int, out: int, status: str = "length") -> RequestRecord:
    return RequestRecord(index=i, status=status, sent_s=sent, first_token_s=first, end_s=end, prompt_tokens=prompt,
                         input_tokens=prompt, completion_tokens=out)


# as a 2-core host recorded them: 512-token prompts in 0.40 / 0.50 / 0.64 s; 64 tokens decoded in 2.1 / 2.52 s
PREFILL = [rec(0, 0.0, 0.40, 0.45, 512, 2), rec(1, 1.0, 1.50, 1.55, 512, 2), rec(2, 2.0, 2.64, 2.7, 512, 2)]
DECODE = [rec(0, 0.0, 0.1, 2.2, 32, 64), rec(1, 3.0, 3.1, 5.62, 32, 64)]
DTYPE = DtypeChoice("float32", "no native bf16", "host")


def test_rates_are_medians_of_tokens_over_seconds():
    assert prefill_rate(PREFILL) == pytest.approx(512 / 0.5)  # median of 1280, 1024, 800
    assert decode_rate(DECODE) == pytest.approx((63 / 2.1 + 63 / 2.52) / 2)  # 30 and 25 tokens/s
    failed = rec(3, 0.0, 0.01, 0.02, 512, 2, status="error")
    assert prefill_rate([failed]) is None and decode_rate([rec(0, 0, 0.1, 0.2, 32, 1)]) is None  # 1 token: no TPOT


def test_the_profile_prices_each_bench_from_its_rates():
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", 60.0), DTYPE)
    assert profile.prefill_tokens_per_s == 1024.0 and profile.decode_tokens_per_s == 27.5
    assert profile.request_s(1024, 56) == pytest.approx(1.0 + 55 / 27.5)  # 1 s prefill + 2 s decode
    load = BenchLoad("x", server_starts=2, requests=30, input_tokens=1024, output_tokens=56, concurrency=3)
    assert load.cost_s(profile, start_s=60.0) == pytest.approx(2 * 60 + 30 * 3.0 / 3)
    assert BenchLoad("y", 0, 1, 1024, 56, fixed_s=300).cost_s(profile, 60.0) == 300  # a design-fixed duration wins
    costs = bench_costs(profile)
    assert set(costs) == {"00", "66", "68", "69", "70", "72", "81"} and all(c > 0 for c in costs.values())
    text = report(profile)
    assert "prefill: 1024 tokens/s" in text and "decode: 27.5 tokens/s" in text and "make bench-72: ~" in text


def test_the_profile_round_trips_and_scales_loads_within_bounds(tmp_path):
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    path = write_profile(profile, tmp_path / "p.json")
    assert read_profile(path) == profile and read_profile(tmp_path / "missing.json") is None
    assert load_scale(None, 128, 24) == 1.0
    # prefill 1024 vs the reference 390 tokens/s, decode 27.5 vs 27.8: a prompt-heavy request gains more here
    here, there = 128 / 1024 + 23 / 27.5, 128 / 390 + 23 / 27.8
    assert load_scale(profile, 128, 24) == pytest.approx(there / here)
    assert load_scale(profile, 1024, 2) > 1.0 > load_scale(profile, 8, 200)  # decode-heavy: 27.5 < 27.8
    fast = HostProfile(**{**profile.__dict__, "decode_tokens_per_s": 3000.0, "prefill_tokens_per_s": 1e6})
    slow = HostProfile(**{**profile.__dict__, "decode_tokens_per_s": 0.1})
    assert load_scale(fast, 128, 24) == 8.0 and load_scale(slow, 128, 24) == 0.125  # bounded


def test_a_default_rate_scales_with_the_profiled_engine_only(tmp_path, monkeypatch):
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    rate, why = default_rate(2.0, "vllm-cpu", (128, 24), profile)
    assert rate == pytest.approx(2.0 * load_scale(profile, 128, 24), abs=1e-3)
    assert "prefill 1024 vs 390 tokens/s, decode 27.5 vs 27.8" in why and "128+24-token request" in why
    assert default_rate(2.0, "vllm", (128, 24), profile) == (2.0, "2 req/s, the reference host's default (vllm is "
                                                                  "not the profiled engine)")
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))  # no profile written there
    rate, why = default_rate(2.0, "vllm-cpu", (128, 24))
    assert rate == 2.0 and "no host profile (run infkit doctor)" in why


# `make doctor` on a 2-core AVX2-only host (float32): prefill 229 tokens/s, decode 17.6 tokens/s
AVX2_ONLY = {"prefill_tokens_per_s": 229.0, "decode_tokens_per_s": 17.6}


def test_a_default_size_shrinks_on_a_slower_host_only_in_steps_and_never_below_its_floor(tmp_path, monkeypatch):
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    slow = HostProfile(**{**profile.__dict__, **AVX2_ONLY})
    # a 544+8-token request: 2.77 s there against 1.65 s on the reference host, x 0.594
    size, why = default_size(512, "vllm-cpu", (544, 8), floor=128, step=128, profile=slow)
    assert size == 256 and "x 0.594 in steps of 128, at least 128" in why and "2.77 s idle here" in why
    assert default_size(16, "vllm-cpu", (128, 24), floor=10, profile=slow)[0] == 10  # 16 x 0.62 = 9.9: the floor
    assert default_size(20, "vllm-cpu", (128, 24), floor=1, profile=slow)[0] == 12  # 20 x 0.62 = 12.4, rounded down
    assert default_size(16, "vllm-cpu", (128, 24), floor=12, profile=slow)[0] == 12  # the floor holds
    crawl = HostProfile(**{**profile.__dict__, "decode_tokens_per_s": 0.1})
    assert default_size(512, "vllm-cpu", (544, 8), floor=128, step=128, profile=crawl)[0] == 128
    fast = HostProfile(**{**profile.__dict__, "prefill_tokens_per_s": 2000.0, "decode_tokens_per_s": 60.0})
    size, why = default_size(512, "vllm-cpu", (544, 8), floor=128, step=128, profile=fast)
    assert size == 512 and "as fast" in why  # a faster host keeps the reference size
    assert default_size(512, "vllm", (544, 8), floor=128, profile=slow) == (
        512, "512, the reference host's default (vllm is not the profiled engine)")
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))  # no profile written there
    assert default_size(512, "vllm-cpu", (544, 8), floor=128)[0] == 512


def test_a_slower_hosts_longer_server_starts_come_out_of_the_sized_work():
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    slow = HostProfile(**{**profile.__dict__, **AVX2_ONLY})
    scale = reference_request_s(544, 2) / slow.request_s(544, 2)  # 0.588
    assert start_excess_s(2, scale) == pytest.approx(2 * REFERENCE_START_S * (1 / scale - 1))  # 56 s
    assert start_excess_s(0, scale) == 0 and start_excess_s(2, 1.0) == 0
    # 120 requests of 1.43 s there: 172 s of work, less the starts' 56 s, x 0.674: 512 x 0.588 x 0.674 = 203
    size, why = default_size(512, "vllm-cpu", (544, 2), floor=128, step=128, starts=2, work_s=120 * 1.431,
                             profile=slow)
    assert size == 128 and "x 0.674 (its 2 server starts about 56 s longer than there, out of 172 s of work)" in why
    assert default_size(512, "vllm-cpu", (544, 2), floor=128, step=128, starts=2, work_s=1e6, profile=slow)[0] == 256
    assert default_size(512, "vllm-cpu", (544, 2), floor=128, step=128, starts=2, work_s=10, profile=slow)[0] == 128
    fast = HostProfile(**{**profile.__dict__, "prefill_tokens_per_s": 2000.0, "decode_tokens_per_s": 60.0})
    assert default_size(512, "vllm-cpu", (544, 2), floor=128, step=128, starts=2, work_s=10, profile=fast)[0] == 512


def test_a_sized_bench_costs_the_reference_time_on_a_slower_host():
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    slow = HostProfile(**{**profile.__dict__, **AVX2_ONLY})
    fixed = BenchLoad("x", server_starts=0, requests=10, input_tokens=544, output_tokens=8)
    sized = replace(fixed, sized=True)
    assert fixed.cost_s(slow, 60.0) == pytest.approx(10 * slow.request_s(544, 8))
    assert sized.cost_s(slow, 60.0) == pytest.approx(10 * reference_request_s(544, 8))
    assert sized.cost_s(profile, 60.0) == fixed.cost_s(profile, 60.0)  # a faster host: its own (shorter) time


def test_bench69_and_bench70_size_their_defaults_from_the_profile_here(tmp_path, monkeypatch):
    from harness.bench.benches import bench69, bench70

    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    write_profile(HostProfile(**{**profile.__dict__, **AVX2_ONLY}), tmp_path / "host-profile.json")
    made = bench69.plan(bench69.Config(), None)
    shared = next(w for w in made.workloads if w.name == "shared-prefix")
    assert shared.options["prefix_tokens"] == 128 and shared.common.input_tokens == 128 + 32
    assert any(n.startswith("shared prefix: 128 = 512 x 0.588 x 0.674 (its 2 server starts") for n in made.notes)
    alone = bench69.plan(bench69.Config(control=False), None)  # one start, two arms: less to take the excess from
    assert next(w for w in alone.workloads if w.name == "shared-prefix").options["prefix_tokens"] == 128
    chosen = bench69.plan(bench69.Config(prefix_tokens=512), None)
    assert next(w for w in chosen.workloads if w.name == "shared-prefix").options["prefix_tokens"] == 512
    assert bench70.list_length(bench70.Config(), "vllm-cpu")[0] == 9
    assert bench70.list_length(bench70.Config(rate_rps=0.5), "vllm-cpu")[0] == 16  # a set rate keeps the list
    assert bench70.list_length(bench70.Config(requests=7), "vllm-cpu") == (7, "7, set by --requests")
    plan70 = bench70.plan(bench70.Config(), None)
    assert "requests per arm: 9 = 16 x 0.619, at least 8" in " ".join(plan70.notes)
    # the closed-loop pair keeps two waves of B = 8 whatever the host: the open list shrinks, the pair's does not
    lists = {w.name: w.common.requests for w in plan70.workloads if w.name in ("bursty", "closed")}
    assert lists == {"bursty": 9, "closed": 16} and "(16: at least 2 waves of B)" in " ".join(plan70.notes)
    bursty = next(w for w in plan70.workloads if w.name == "bursty").common  # offered at the rate it states
    sends = offsets(bursty.arrival, bursty.requests, bursty.seed_for("arrival"))
    rate = bench70.arrival_rate(bench70.Config(), "vllm-cpu")[0]
    assert (bursty.requests - 1) / sends[-1] == pytest.approx(rate, rel=1e-3) and bursty.arrival.rate_rps != rate
    wide = bench70.plan(bench70.Config(concurrency=12), None)
    assert next(w for w in wide.workloads if w.name == "closed").common.requests == 24


def test_bench68_shortens_its_requests_on_a_slower_host_prompt_and_output_alike(tmp_path, monkeypatch):
    from harness.bench.benches import bench68

    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    reference = bench68.request_lengths(bench68.Config(), "vllm-cpu", 5)  # no profile: the reference lengths
    assert (reference.input_tokens, reference.output_tokens, reference.control_output_tokens) == (256, 48, 48)
    write_profile(HostProfile(**{**profile.__dict__, **AVX2_ONLY}), tmp_path / "host-profile.json")
    # a 256+48-token request: 3.79 s there against 2.35 s, x 0.620; five starts about 123 s longer, out of 490 s:
    # 48 x 0.620 x 0.749 = 22.3, in steps of 4: 20; the prompt in proportion, 256 x 20/48 = 107
    slow = bench68.request_lengths(bench68.Config(), "vllm-cpu", 5)
    assert (slow.input_tokens, slow.output_tokens, slow.control_output_tokens) == (107, 20, 20)
    assert slow.why.startswith("20 output tokens: 20 = 48 x 0.62 x 0.749 (its 5 server starts about 123 s longer")
    assert bench68.request_lengths(bench68.Config(), "vllm-cpu", 2).output_tokens == 24  # fewer starts: less excess
    assert bench68.request_lengths(bench68.Config(), "vllm", 5).output_tokens == 48  # not the profiled engine
    chosen = bench68.request_lengths(bench68.Config(output_tokens=40), "vllm-cpu", 5)  # a set length is kept
    assert (chosen.input_tokens, chosen.output_tokens, chosen.control_output_tokens) == (256, 40, 48)
    assert "set by --output-tokens" in chosen.why
    prompt = bench68.request_lengths(bench68.Config(input_tokens=200, control_output_tokens=30), "vllm-cpu", 5)
    assert (prompt.input_tokens, prompt.output_tokens, prompt.control_output_tokens) == (200, 20, 30)


def test_bench66_shortens_its_requests_on_a_slower_host_so_its_floor_held_levels_keep_their_time(tmp_path, monkeypatch):
    from harness.bench.benches import bench66

    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    assert bench66.request_shape(bench66.Config(), "vllm-cpu")[:2] == (128, 16)  # no profile: the reference shape
    write_profile(HostProfile(**{**profile.__dict__, **AVX2_ONLY}), tmp_path / "host-profile.json")
    # a 128+16-token request: 1.41 s here against 0.87 s, x 0.615; its start about 25 s longer, out of 160 s:
    # 16 x 0.615 x 0.843 = 8.3 -> 8; the prompt in proportion, 128 x 8/16 = 64
    prompt, output, why = bench66.request_shape(bench66.Config(), "vllm-cpu")
    assert (prompt, output) == (64, 8)
    assert why.startswith("8 output tokens: 8 = 16 x 0.615 x 0.843 (its 1 server start about 25 s longer")
    made = bench66.plan(bench66.Config(), None)
    assert (made.warmup.input_tokens, made.warmup.output_tokens) == (64, 8)
    assert made.notes[0] == f"request lengths: {why}"
    assert bench66.request_shape(bench66.Config(), "vllm")[:2] == (128, 16)  # not the profiled engine
    assert bench66.request_shape(bench66.Config(output_tokens=12), "vllm-cpu")[:2] == (128, 12)  # set: kept
    assert bench66.request_shape(bench66.Config(input_tokens=200), "vllm-cpu")[:2] == (200, 8)


def test_bench81_shortens_its_requests_on_a_slower_host_but_keeps_its_closed_loop(tmp_path, monkeypatch):
    from harness.bench.benches import bench81

    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    cfg = bench81.Config()
    assert (cfg.input_tokens, cfg.output_tokens) == (None, None)  # unset: sized where the plan runs
    assert bench81.sized(cfg, "vllm-cpu")[0].output_tokens == 32  # no profile: the reference host's 256 + 32
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    write_profile(HostProfile(**{**profile.__dict__, **AVX2_ONLY}), tmp_path / "host-profile.json")
    # a 256+32-token request: 2.88 s here against 1.77 s, x 0.615: 32 x 0.615 = 19.7, in steps of 4: 16 (the
    # floor); the prompt in proportion, 256 x 16/32 = 128. No start excess is taken out (the runs cannot buy it back)
    here, shape, why = bench81.sized(cfg, "vllm-cpu")
    assert (here.input_tokens, here.output_tokens) == shape == (128, 16)
    assert why.startswith("16 output tokens: 16 = 32 x 0.615 in steps of 4, at least 16")
    assert (here.requests, here.concurrency) == (cfg.requests, cfg.concurrency)  # the steady window is kept
    assert bench81.sized(cfg, "vllm")[0].output_tokens == 32  # not the profiled engine
    chosen = bench81.sized(bench81.Config(output_tokens=24, input_tokens=300), "vllm-cpu")[0]
    assert (chosen.input_tokens, chosen.output_tokens) == (300, 24)  # set: kept
    made = bench81.plan(bench81.Config(layouts=("pp2",)), None)
    assert (made.warmup.input_tokens, made.warmup.output_tokens) == (128, 16)
    assert made.notes[0] == f"request lengths: {why}"
