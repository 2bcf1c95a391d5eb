"""Prometheus parsing, run deltas (absent is not zero), histogram quantiles, peak sampling."""

from __future__ import annotations

import os

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.telemetry import (
    PeakSampler,
    histogram_quantile,
    parse,
    process_tree_rss,
    scrape,
    summarize,
)

VLLM_BEFORE = """\
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 2
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="0.01",model_name="m"} 10
vllm:request_queue_time_seconds_bucket{le="0.1",model_name="m"} 10
vllm:request_queue_time_seconds_bucket{le="1.0",model_name="m"} 10
vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"} 10
vllm:request_queue_time_seconds_sum{model_name="m"} 0.05
vllm:request_queue_time_seconds_count{model_name="m"} 10
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
"""

VLLM_AFTER = (
    VLLM_BEFORE.replace("} 1000", "} 1600")
    .replace('engine="1",model_name="m"} 500', 'engine="1",model_name="m"} 900')
    .replace('hits_total{engine="0",model_name="m"} 100', 'hits_total{engine="0",model_name="m"} 400')
    .replace('hits_total{engine="1",model_name="m"} 0', 'hits_total{engine="1",model_name="m"} 200')
    .replace('num_preemptions_total{model_name="m"} 2', 'num_preemptions_total{model_name="m"} 5')
    .replace('le="0.01",model_name="m"} 10', 'le="0.01",model_name="m"} 12')
    .replace('le="0.1",model_name="m"} 10', 'le="0.1",model_name="m"} 16')
    .replace('le="1.0",model_name="m"} 10', 'le="1.0",model_name="m"} 20')
    .replace('le="+Inf",model_name="m"} 10', 'le="+Inf",model_name="m"} 20')
    .replace('_sum{model_name="m"} 0.05', '_sum{model_name="m"} 1.05')
    .replace('_count{model_name="m"} 10', '_count{model_name="m"} 20')
)


def test_parse_sums_label_sets():
    snap = parse(VLLM_BEFORE)
    assert snap.total("vllm:prefix_cache_queries_total") == 1500
    assert snap.total("vllm:absent_total") is None
    assert snap.buckets("vllm:request_queue_time_seconds") == {0.01: 10, 0.1: 10, 1.0: 10, float("inf"): 10}


def test_a_poll_parses_only_the_samples_it_names():
    only = frozenset({"vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:num_requests_running"})
    snap = parse(VLLM_BEFORE + "vllm:num_requests_running 3\n", only=only)
    assert snap.names() == {"vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:num_requests_running"}
    assert snap.total("vllm:kv_cache_usage_perc") == 0.1 and snap.total("vllm:num_requests_running") == 3
    full = parse(VLLM_BEFORE)
    assert snap.total("vllm:num_preemptions_total") == full.total("vllm:num_preemptions_total") == 2
    assert parse(VLLM_BEFORE, only=frozenset()).names() == set()


def test_deltas_across_the_run():
    s = summarize(parse(VLLM_BEFORE), parse(VLLM_AFTER), {"vllm:kv_cache_usage_perc": 0.73})
    # hits 100 -> 600 (+500), queries 1500 -> 2500 (+1000)
    assert s["prefix_cache"]["hits"] == 500 and s["prefix_cache"]["queries"] == 1000
    assert s["prefix_cache"]["hit_rate"] == 0.5
    assert s["preemptions"] == 3
    assert s["kv_cache_usage_peak"] == 0.73  # polled peak beats the end-point values
    assert s["queue_time_ms"]["n"] == 10 and s["queue_time_ms"]["mean_ms"] == 100.0
    q = s["queue_time_ms"]["distribution"]
    # delta buckets: <=0.01: 2, <=0.1: 6, <=1.0: 10 of 10; sum +1.0 s over 10 requests
    assert q["n"] == 10 and q["mean"] == 100.0
    assert q["p50"] == pytest.approx(77.5)  # rank 5 in (0.01, 0.1] holding ranks 2..6: 10 + 90 * (5-2)/(6-2) ms
    assert "spec_decode" in s["absent"] and s["spec_decode"] is None


def spec_text(drafts: int, drafted: int, accepted: int, per_pos: list[int]) -> str:
    lab = 'engine="0",model_name="m"'
    lines = [
        f"# TYPE vllm:spec_decode_num_{name}_total counter\nvllm:spec_decode_num_{name}_total{{{lab}}} {value}"
        for name, value in (("drafts", drafts), ("draft_tokens", drafted), ("accepted_tokens", accepted))
    ]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{k}"}} {v}' for k, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def test_spec_decode_deltas_with_acceptance_per_position():
    before, after = parse(spec_text(10, 40, 20, [8, 6, 4, 2])), parse(spec_text(30, 120, 50, [26, 15, 7, 2]))
    spec = summarize(before, after)["spec_decode"]
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (20, 80, 30)
    assert spec["acceptance_rate"] == 0.375 and spec["mean_acceptance_length"] == 2.5
    assert spec["accepted_tokens_per_position"] == [18, 9, 3, 0]
    assert parse(spec_text(1, 1, 1, [1, 0])).by_label(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"
    ) == {"0": 1.0, "1": 0.0}
    older = summarize(parse(spec_text(1, 4, 2, [])), parse(spec_text(2, 8, 3, [])))
    assert older["spec_decode"]["accepted_tokens_per_position"] is None
    assert "spec_decode.accepted_tokens_per_position" in older["absent"]


def test_absent_is_not_zero_and_restart_is_detected():
    bare = parse("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n")
    s = summarize(bare, bare)
    assert s["prefix_cache"] is None and "prefix_cache" in s["absent"]
    assert s["queue_time_ms"] is None and s["preemptions"] is None
    restarted = summarize(parse(VLLM_AFTER), parse(VLLM_BEFORE))
    assert restarted["prefix_cache"] is None and "restarted" in restarted["absent"]["prefix_cache"]
    nothing = summarize(None, parse(VLLM_AFTER))
    assert "no /metrics snapshot before" in nothing["absent"]["prefix_cache"]


def test_histogram_quantile_interpolates_inside_buckets():
    buckets = {0.1: 2.0, 0.2: 6.0, 0.4: 10.0, float("inf"): 10.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.175)  # rank 5: 0.1 + 0.1 * (5-2)/(6-2)
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.05)  # rank 1 in the first bucket, from 0
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.395)  # rank 9.9: 0.2 + 0.2 * (9.9-6)/(10-6)
    assert histogram_quantile(0.99, {0.1: 1.0, float("inf"): 10.0}) == 0.1  # +Inf: highest finite bound


def test_sglang_names():
    before = parse("sglang:cached_tokens_total 10\nsglang:prompt_tokens_total 100\nsglang:token_usage 0.2\n")
    after = parse("sglang:cached_tokens_total 70\nsglang:prompt_tokens_total 200\nsglang:token_usage 0.4\n")
    s = summarize(before, after)
    assert s["prefix_cache"]["hit_rate"] == 0.6 and s["prefix_cache"]["series"][0] == "sglang:cached_tokens_total"
    assert s["kv_cache_usage_peak"] == 0.4 and s["tokens"]["prompt_tokens"] == 100


def test_scrape_of_fake_server_and_unreachable_endpoint():
    with FakeOpenAIServer(FakeConfig(spec_decode=True)) as srv:
        got = scrape(srv.url + "/metrics")
        assert got.error is None and got.snapshot.total("vllm:prompt_tokens_total") == 0
        assert "vllm:spec_decode_num_drafts_total" in got.snapshot.names()
    gone = scrape("http://127.0.0.1:9/metrics", timeout_s=1)
    assert gone.snapshot is None and gone.error


def test_peak_sampler_keeps_the_peak_and_counts_failures():
    readings = iter([5, None, 9, 7])
    sampler = PeakSampler(lambda: next(readings, 3), interval_s=0.001)
    for _ in range(4):
        sampler.sample()
    assert sampler.peak_bytes == 9 and sampler.failures == 1 and sampler.samples == 3
    rss = process_tree_rss(os.getpid())
    assert rss is not None and rss > 10_000_000
    assert process_tree_rss(2**22 + 12345) is None


def test_histogram_below_its_first_bucket_is_unresolved_not_interpolated():
    def snap(count: int, total_s: float):
        return parse(
            f'h_bucket{{le="0.3"}} {count}\nh_bucket{{le="1.0"}} {count}\nh_bucket{{le="+Inf"}} {count}\n'
            f"h_sum {total_s}\nh_count {count}\n"
        )

    from harness.telemetry.server_metrics import histogram_delta_ms

    observed, why = histogram_delta_ms(snap(0, 0.0), snap(8, 0.00016), "h")
    assert why is None and observed["n"] == 8 and observed["mean_ms"] == 0.02
    assert observed["distribution"] is None and "below the smallest bucket bound (300 ms)" in observed["unresolved"]


def test_sglang_cached_tokens_absent_until_the_first_hit_counts_as_zero():
    from sglang_metrics import AFTER_HITS, AFTER_NO_HITS, BEFORE

    before = parse(BEFORE)
    assert before.total("sglang:cached_tokens_total") is None  # lazily created: no hit yet
    hits = summarize(before, parse(AFTER_HITS))
    assert hits["prefix_cache"] == {
        "hits": 4096,
        "queries": 6336,
        "hit_rate": round(4096 / 6336, 6),
        "series": ["sglang:cached_tokens_total", "sglang:prompt_tokens_total"],
    }
    none = summarize(before, parse(AFTER_NO_HITS))
    assert none["prefix_cache"]["hits"] == 0 and none["prefix_cache"]["hit_rate"] == 0
    assert "prefix_cache" not in none["absent"]
    # without the paired counter the engine exported nothing: absent, never zero
    bare = parse("sglang:num_running_reqs 0\n")
    assert summarize(bare, bare)["prefix_cache"] is None


def test_sglang_gauge_peaks_leave_out_the_before_run_value():
    from sglang_metrics import AFTER_HITS, BEFORE

    before, after = parse(BEFORE), parse(AFTER_HITS)
    # the scheduler logs late: the first polls still show the warm-up's values (running 1, usage 0.02)
    polled = {
        "sglang:num_running_reqs": [1, 1, 3, 2, 1],
        "sglang:token_usage": [0.02, 0.02, 0.04, 0.05],
        "sglang:num_queue_reqs": [0, 0, 0],
    }
    s = summarize(before, after, polled)
    assert s["running_peak"] == 3 and s["kv_cache_usage_peak"] == 0.05
    # a stale value above everything the run did is not its peak
    stale = parse(BEFORE.replace('pp_rank="0",tp_rank="0"} 1.0', 'pp_rank="0",tp_rank="0"} 5.0', 1))
    assert stale.total("sglang:num_running_reqs") == 5
    assert summarize(stale, after, {"sglang:num_running_reqs": [5, 5, 2, 1]})["running_peak"] == 2
    # never refreshed during the run: no peak, and the reason says why
    flat = summarize(before, before, {"sglang:num_running_reqs": [1, 1], "sglang:token_usage": [0.02]})
    assert flat["running_peak"] is None and "not refreshed" in flat["absent"]["running_peak"]
    # vLLM's gauges are set every step: a reading equal to the start is a real reading
    v = parse("vllm:num_requests_running 1\n")
    assert summarize(v, v, {"vllm:num_requests_running": [1, 1]})["running_peak"] == 1


def test_sglang_retractions_are_its_preemptions():
    from sglang_metrics import AFTER_HITS, AFTER_NO_HITS, BEFORE

    s = summarize(parse(BEFORE), parse(AFTER_HITS), {"sglang:num_retracted_reqs": [0, 0, 2, 0]})
    assert s["preemptions"] == 2 and s["preemptions_series"].startswith("sglang:num_retracted_reqs")
    assert "preemptions" not in s["absent"]
    # no retraction, and the scheduler did log (its running gauge moved): a real 0
    quiet = summarize(
        parse(BEFORE), parse(AFTER_NO_HITS), {"sglang:num_retracted_reqs": [0, 0], "sglang:num_running_reqs": [1, 2, 1]}
    )
    assert quiet["preemptions"] == 0 and quiet["waiting_peak"] == 0
    # nothing the scheduler sets moved: it did not log during the run, so nothing is known
    silent = summarize(parse(BEFORE), parse(BEFORE), {"sglang:num_retracted_reqs": [0, 0]})
    assert silent["preemptions"] is None and "not refreshed" in silent["absent"]["preemptions"]
    # a retraction counter, where the engine has one, is a plain delta
    counted = summarize(
        parse("sglang:num_retracted_requests_total 3\n"), parse("sglang:num_retracted_requests_total 7\n")
    )
    assert counted["preemptions"] == 4


def test_sglang_queue_time_from_its_histogram():
    from sglang_metrics import AFTER_HITS, BEFORE

    q = summarize(parse(BEFORE), parse(AFTER_HITS))["queue_time_ms"]
    assert q["series"] == "sglang:queue_time_seconds" and q["n"] == 6
    assert q["mean_ms"] == round((0.1374 - 0.0031) / 6 * 1e3, 4)
