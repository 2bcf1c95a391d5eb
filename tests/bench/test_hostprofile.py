"""The host profile's arithmetic from recorded request timings (no server: the rates are given), and the named sizes
that replace host-derived sizing: the same size makes the same requests whatever the profile says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.backends.host_dtype import DtypeChoice
from harness.bench.lib.hostprofile import (
    BenchLoad,
    HostProfile,
    bench_costs,
    decode_rate,
    default_rate,
    default_size,
    prefill_rate,
    read_profile,
    recommended_size,
    request_cost_ratio,
    size_warning,
    sized_shape,
    write_profile,
)
from harness.bench.spec import InputFile
from harness.client.records import RequestRecord
from harness.commands.doctor import Target, profile_from, report
from harness.workload import make_workload
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
    assert load.cost_s(profile, 60.0, "quick") == load.cost_s(profile, 60.0)  # unsized work does not follow the size
    sized = BenchLoad("s", server_starts=2, requests=30, input_tokens=1024, output_tokens=56, concurrency=3, sized=True)
    assert sized.cost_s(profile, 60.0, "quick") == pytest.approx(2 * 60 + 0.5 * 30 * 3.0 / 3)
    assert BenchLoad("y", 0, 1, 1024, 56, fixed_s=300).cost_s(profile, 60.0) == 300  # a design-fixed duration wins
    costs = bench_costs(profile)
    assert set(costs) == {"00", "66", "68", "69", "70", "72", "81"} and all(c > 0 for c in costs.values())
    text = report(profile)
    assert "prefill: 1024 tokens/s" in text and "decode: 27.5 tokens/s" in text and "bench-72" in text
    assert "recommended: SIZE=" in text


def test_the_profile_round_trips(tmp_path):
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    path = write_profile(profile, tmp_path / "p.json")
    assert read_profile(path) == profile and read_profile(tmp_path / "missing.json") is None


def test_a_named_size_scales_the_reference_defaults_in_steps_never_below_a_floor():
    assert default_rate(2.0, "reference") == (2.0, "2 req/s (SIZE=reference: the reference host's default)")
    assert default_rate(2.0, "quick") == (1.0, "1 req/s = 2 x 0.5 (SIZE=quick: the reference host's default scaled)")
    assert default_size(512, "reference", floor=128, step=128)[0] == 512
    assert default_size(512, "quick", floor=128, step=128) == (256, "256 = 512 x 0.5 in steps of 128, at least 128 "
                                                                    "(SIZE=quick)")
    assert default_size(16, "quick", floor=10)[0] == 10  # 16 x 0.5 = 8: the floor holds
    assert default_size(20, "quick", floor=1)[0] == 10
    assert sized_shape((256, 48), "quick", floor=16, step=4)[:2] == (128, 24)  # the prompt in proportion
    assert request_cost_ratio((128, 16), (256, 32))[0] == pytest.approx(
        (128 / 390 + 15 / 27.8) / (256 / 390 + 31 / 27.8))  # the reference host's rates, whatever the host


# `make doctor` on a 2-core AVX2-only host (float32): prefill 229 tokens/s, decode 17.6 tokens/s
AVX2_ONLY = {"prefill_tokens_per_s": 229.0, "decode_tokens_per_s": 17.6}


def test_doctor_recommends_the_largest_size_that_fits_and_a_bench_warns_before_overrunning():
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", 40.0), DTYPE)
    assert recommended_size(profile) == "reference" and size_warning("69", "reference", profile) is None
    crawl = HostProfile(**{**profile.__dict__, "prefill_tokens_per_s": 60.0, "decode_tokens_per_s": 4.0})
    warning = size_warning("69", "reference", crawl)
    assert warning is not None and warning.startswith("bench-69 at SIZE=reference is estimated at ~")
    assert "over its 6 min target" in warning and "replays the same requests on every host" in warning
    assert size_warning("nope", "reference", crawl) is None


def _plans(bench: str):
    from harness.bench.benches import bench66, bench69, bench70, bench81

    made = {"66": lambda size: bench66.plan(bench66.Config(size=size), None),
            "69": lambda size: bench69.plan(bench69.Config(size=size), None),
            "70": lambda size: bench70.plan(bench70.Config(size=size), None),
            "81": lambda size: bench81.plan(bench81.Config(layouts=("pp2",), size=size), None)}[bench]
    return made


def _ids(plan, tokenizer_dir) -> dict[str, str]:
    """Each named workload's id; a bench that makes its lists while running (66, 81) sends them in the plan's
    request shape, its warm-up's: a list of that shape stands for them."""
    made = {w.name: make_workload(w.kind, w.common, dict(w.options), tokenizer_dir).workload_id
            if not any(isinstance(v, InputFile) for v in w.options.values()) else repr(w)  # a file it reads: as data
            for w in plan.workloads}
    if not made:
        common = replace(plan.warmup, requests=8)
        made["shape"] = make_workload("random", common, {}, tokenizer_dir).workload_id
    return made


@pytest.mark.parametrize("bench", ["66", "69", "70", "81"])
def test_the_same_size_replays_byte_identical_workloads_whatever_the_host_profile_says(bench, tmp_path, monkeypatch,
                                                                                       tokenizer_dir):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    plan_at = _plans(bench)
    unprofiled = {size: _ids(plan_at(size), tokenizer_dir) for size in ("quick", "reference")}
    profile = profile_from({"prefill": PREFILL, "decode": DECODE}, Target("http://h", "m", None), DTYPE)
    for rates in (AVX2_ONLY, {"prefill_tokens_per_s": 5000.0, "decode_tokens_per_s": 300.0}):
        write_profile(HostProfile(**{**profile.__dict__, **rates}), tmp_path / "host-profile.json")
        assert {size: _ids(plan_at(size), tokenizer_dir) for size in ("quick", "reference")} == unprofiled
    assert unprofiled["quick"] != unprofiled["reference"]  # a size is a different request list, named


def test_bench69_and_bench70_follow_the_named_size():
    from harness.bench.benches import bench69, bench70

    made = bench69.plan(bench69.Config(size="quick"), None)
    shared = next(w for w in made.workloads if w.name == "shared-prefix")
    assert shared.options["prefix_tokens"] == 256 and shared.common.input_tokens == 256 + 32
    assert "shared prefix: 256 = 512 x 0.5 in steps of 128, at least 128 (SIZE=quick)" in made.notes
    chosen = bench69.plan(bench69.Config(size="quick", prefix_tokens=512), None)
    assert next(w for w in chosen.workloads if w.name == "shared-prefix").options["prefix_tokens"] == 512
    assert bench70.list_length(bench70.Config(size="quick"))[0] == 8
    assert bench70.list_length(bench70.Config()) == (16, "16 (SIZE=reference: the reference host's default)")
    assert bench70.list_length(bench70.Config(size="quick", rate_rps=0.5))[0] == 16  # a set rate keeps the list
    assert bench70.list_length(bench70.Config(requests=7)) == (7, "7, set by --requests")
    plan70 = bench70.plan(bench70.Config(size="quick"), None)
    assert "requests per arm: 8 = 16 x 0.5, at least 8 (SIZE=quick)" in " ".join(plan70.notes)
    # the closed-loop pair keeps two waves of B = 8 at every size: the open list shrinks, the pair's does not
    lists = {w.name: w.common.requests for w in plan70.workloads if w.name in ("bursty", "closed")}
    assert lists == {"bursty": 8, "closed": 16} and "(16: at least 2 waves of B)" in " ".join(plan70.notes)
    bursty = next(w for w in plan70.workloads if w.name == "bursty").common  # offered at the rate it states
    sends = offsets(bursty.arrival, bursty.requests, bursty.seed_for("arrival"))
    rate = bench70.arrival_rate(bench70.Config(size="quick"))[0]
    assert rate == 0.5 and (bursty.requests - 1) / sends[-1] == pytest.approx(rate, rel=1e-3)
    wide = bench70.plan(bench70.Config(concurrency=12), None)
    assert next(w for w in wide.workloads if w.name == "closed").common.requests == 24


def test_bench68_66_and_81_shorten_their_requests_at_a_smaller_size_prompt_and_output_alike():
    from harness.bench.benches import bench66, bench68, bench81

    reference = bench68.request_lengths(bench68.Config())
    assert (reference.input_tokens, reference.output_tokens, reference.control_output_tokens) == (192, 32, 32)
    quick = bench68.request_lengths(bench68.Config(size="quick"))
    assert (quick.input_tokens, quick.output_tokens, quick.control_output_tokens) == (96, 16, 16)
    assert quick.why.startswith("16 output tokens: 16 = 32 x 0.5 in steps of 4, at least 16 (SIZE=quick)")
    chosen = bench68.request_lengths(bench68.Config(size="quick", output_tokens=40))  # a set length is kept
    assert (chosen.input_tokens, chosen.output_tokens, chosen.control_output_tokens) == (192, 40, 32)
    assert bench66.request_shape(bench66.Config())[:2] == (128, 16)
    prompt, output, why = bench66.request_shape(bench66.Config(size="quick"))
    assert (prompt, output) == (64, 8) and why.startswith("8 output tokens: 8 = 16 x 0.5, at least 8")
    made = bench66.plan(bench66.Config(size="quick"), None)
    assert (made.warmup.input_tokens, made.warmup.output_tokens) == (64, 8)
    assert bench66.request_shape(bench66.Config(size="quick", input_tokens=200))[:2] == (200, 8)
    cfg = bench81.Config()
    assert bench81.sized(cfg)[0].output_tokens == 32
    here, shape, why = bench81.sized(bench81.Config(size="quick"))
    assert (here.input_tokens, here.output_tokens) == shape == (128, 16)
    assert (here.requests, here.concurrency) == (cfg.requests, cfg.concurrency)  # the steady window is kept
    chosen81 = bench81.sized(bench81.Config(size="quick", output_tokens=24, input_tokens=300))[0]
    assert (chosen81.input_tokens, chosen81.output_tokens) == (300, 24)  # set: kept
