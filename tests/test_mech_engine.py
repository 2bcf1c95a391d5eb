"""Batching engine: an exact event trace, analytic jumps equal to per-token stepping, policies, modes."""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import InvalidInput
from harness.mech.batching import BatchingConfig, engine_config
from harness.mech.batching import run as run_batching
from harness.mech.engine.blocks import PlainPool
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.engine import Engine
from harness.mech.engine.simulate import HandOff, run_continuous, run_disaggregated, run_static
from harness.mech.engine.types import EngineConfig, Seq
from harness.mech.engine.workload import SimRequest, SimWorkload, SyntheticSpec, synthetic
from harness.mech.lifecycle import TINY_COST, TINY_ENGINE, TINY_REQUESTS, tiny_trace

# 3 requests, budget 8 tokens, block size 4, 4 blocks, step = 1 + 0.5/prefill token + 0.25/decoding seq (ms).
# Step 1 (0 -> 5): r0 prefills 5 (2 blocks), r1 a 3-token chunk (1 block); r0's first token.
# Step 2 (5 -> 7.75): r0 decodes, r1's last 3 prompt tokens (4th block); r2 (arrived at 2) finds no block.
# Steps 3-4 (-> 10.75): both decode to KV length 8; both need a 5th block: r1, the last admitted, is preempted.
# r0 decodes alone (3 steps of 1.25) to its 8th token at 15.75 and frees 3 blocks.
# 15.75 -> 20.75: r1 recomputes 8 of its 9 tokens (6 prompt + 3 generated); r2 cannot get budget.
# 20.75 -> 23.75: r1's last token + r2's 3-token prompt. 23.75 -> 25.25: both decode; r1 stops at 5, r2 at 2.
EXPECTED_TRACE = [
    (0.0, 0, "arrive"), (0.0, 1, "arrive"), (0.0, 0, "schedule"), (0.0, 1, "schedule"),
    (5.0, 0, "first_token"), (2.0, 2, "arrive"), (7.75, 1, "first_token"), (10.75, 1, "preempt"),
    (15.75, 0, "finish_length"), (15.75, 1, "schedule"), (20.75, 2, "schedule"), (23.75, 2, "first_token"),
    (25.25, 1, "finish_stop"), (25.25, 2, "finish_length"),
]


def test_exact_event_trace_three_requests_block_size_four() -> None:
    events, outputs = tiny_trace()
    assert [(round(e.t_s * 1000, 6), e.index, e.kind) for e in events] == EXPECTED_TRACE
    assert outputs == {0: 8, 1: 5, 2: 2}


def test_tiny_trace_same_without_analytic_jumps() -> None:
    stepped = Engine(dataclasses.replace(TINY_ENGINE, analytic=False), TINY_COST, PlainPool(4, 4),
                     [Seq(r, r.arrival_s) for r in TINY_REQUESTS]).run()
    assert [(round(e.t_s * 1000, 6), e.index, e.kind) for e in stepped.events] == EXPECTED_TRACE
    assert stepped.jumps == 0


@pytest.mark.parametrize("num_blocks", [100_000, 600])  # plenty of blocks; scarce blocks (preemptions)
def test_analytic_jumps_equal_per_token_stepping(num_blocks: int) -> None:
    wl = synthetic(SyntheticSpec(requests=400, rate_rps=30, input_mean=300, output_mean=150, seed=5))
    cost = StepCostModel(base_ms=2, prefill_ms_per_token=0.05, prefill_ms_per_kilopair=0.01,
                         decode_ms_per_seq=0.3, decode_ms_per_kilotoken=0.02)
    cfg = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=48, block_size=16, num_blocks=num_blocks)
    fast, _ = run_continuous(wl, cfg, cost)
    slow, _ = run_continuous(wl, dataclasses.replace(cfg, analytic=False), cost)
    assert fast.jumps > 0 and slow.jumps == 0
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    if num_blocks == 600:
        assert fast.preemptions > 0
    for a, b in zip(fast.records, slow.records, strict=True):
        assert (a.index, a.output_tokens, a.reason, a.preemptions) == (b.index, b.output_tokens, b.reason,
                                                                        b.preemptions)
        assert a.finish_s == pytest.approx(b.finish_s, rel=1e-9, abs=1e-9)
        assert a.first_token_s == pytest.approx(b.first_token_s, rel=1e-9, abs=1e-9)


def test_every_request_finishes_with_its_target_tokens() -> None:
    wl = synthetic(SyntheticSpec(requests=300, rate_rps=50, seed=1))
    run, pool = run_continuous(wl, EngineConfig(max_num_batched_tokens=512, max_num_seqs=32, num_blocks=700),
                               StepCostModel())
    assert len(run.records) == 300
    assert all(r.output_tokens == wl.requests[r.index].output_tokens for r in run.records)
    assert pool.num_free == 700  # every block came back


def test_continuous_beats_static_on_ttft() -> None:
    wl = synthetic(SyntheticSpec(requests=300, rate_rps=6, seed=2))
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=32)
    cont, _ = run_continuous(wl, cfg, StepCostModel())
    stat = run_static(wl, cfg, StepCostModel())
    med = sorted(r.ttft_s for r in cont.records)[150]
    med_static = sorted(r.ttft_s for r in stat.records)[150]
    assert med < med_static


def test_static_batch_hand_computed() -> None:
    reqs = (SimRequest(0, 0.0, 4, 3), SimRequest(1, 0.0, 2, 2))
    wl = SimWorkload(reqs, "sha256:" + "1" * 64, "trace", {"process": "trace"})
    cost = StepCostModel(base_ms=1, prefill_ms_per_token=1, decode_ms_per_seq=1, decode_ms_per_kilotoken=0)
    run = run_static(wl, EngineConfig(), cost)
    # prefill padded to 2 x 4 tokens: 1 + 8 = 9 ms; decode steps of the padded pair: 1 + 2 = 3 ms each
    assert run.records[0].first_token_s == pytest.approx(0.009)
    assert run.records[0].finish_s == pytest.approx(0.009 + 2 * 0.003)
    assert run.records[1].finish_s == pytest.approx(0.009 + 0.003)


def test_disaggregation_exposed_vs_overlapped() -> None:
    wl = synthetic(SyntheticSpec(requests=50, rate_rps=5, input_mean=1000, seed=3))
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=16)
    slow_link = HandOff(kv_bytes_per_token=131072, kv_bandwidth_gbps=10, kv_latency_ms=1, overlap=False)
    _, serial = run_disaggregated(wl, cfg, StepCostModel(), slow_link)
    _, overlapped = run_disaggregated(wl, cfg, StepCostModel(), dataclasses.replace(slow_link, overlap=True))
    assert serial["exposed_ms_mean"] == pytest.approx(serial["transfer_ms_mean"])
    assert overlapped["exposed_ms_mean"] < serial["exposed_ms_mean"]
    assert overlapped["exposed_ms_mean"] + overlapped["overlapped_ms_mean"] == pytest.approx(
        overlapped["transfer_ms_mean"])
    # 1000 tokens x 128 KiB at 10 Gb/s is ~105 ms + 1 ms latency
    assert serial["transfer_ms_mean"] == pytest.approx(1 + 1000 * 131072 * 8 / 10e9 * 1000, rel=0.6)


def test_priority_policy_serves_urgent_first() -> None:
    reqs = tuple(SimRequest(i, 0.0, 100, 10, priority=(0 if i == 3 else 1)) for i in range(4))
    wl = SimWorkload(reqs, "sha256:" + "2" * 64, "trace", {"process": "trace"})
    cfg = EngineConfig(max_num_batched_tokens=100, max_num_seqs=1, policy="priority")
    run, _ = run_continuous(wl, cfg, StepCostModel())
    assert min(run.records, key=lambda r: r.first_token_s).index == 3


def test_queue_timeout_and_closed_loop() -> None:
    reqs = tuple(SimRequest(i, 0.0, 200, 50) for i in range(6))
    wl = SimWorkload(reqs, "sha256:" + "3" * 64, "trace", {"process": "trace"})
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=1, queue_timeout_s=0.05)
    run, _ = run_continuous(wl, cfg, StepCostModel())
    reasons = [r.reason for r in run.records]
    assert reasons[0] == "length" and "timeout" in reasons
    closed = SimWorkload(tuple(dataclasses.replace(r, arrival_s=None) for r in reqs), "sha256:" + "4" * 64,
                         "trace", {"process": "closed"}, concurrency=2)
    run, _ = run_continuous(closed, EngineConfig(max_num_batched_tokens=512, max_num_seqs=8), StepCostModel())
    assert len(run.records) == 6 and max(r.queue_wait_s for r in run.records) == 0


def test_request_larger_than_the_pool_errors_not_hangs() -> None:
    wl = SimWorkload((SimRequest(0, 0.0, 100, 5),), "sha256:" + "5" * 64, "trace", {"process": "trace"})
    run, _ = run_continuous(wl, EngineConfig(max_num_batched_tokens=128, max_num_seqs=4, block_size=16,
                                             num_blocks=3), StepCostModel())
    assert run.records[0].reason == "error"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_num_batched_tokens": 0}, ">= 1"),
    ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "so every running request can decode"),
    ({"policy": "random"}, "unknown scheduling policy"),
    ({"queue_timeout_s": -1.0}, "queue_timeout_s"),
])
def test_invalid_engine_configs(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        EngineConfig(**kwargs)


def test_prompt_over_budget_without_chunked_prefill() -> None:
    cfg = BatchingConfig(requests=20, input_mean=3000, max_num_batched_tokens=2048, chunked_prefill=False)
    with pytest.raises(InvalidInput, match="without chunked prefill"):
        run_batching(cfg)


def test_batching_run_is_deterministic() -> None:
    cfg = BatchingConfig(requests=200)
    a, b = run_batching(cfg), run_batching(cfg)
    assert a.details == b.details and a.performance == b.performance
    assert engine_config(cfg).max_num_seqs == 64


def test_block_demand_over_k_steps_matches_brute_force() -> None:
    import random

    rng = random.Random(0)
    for _ in range(200):
        bs = rng.choice([1, 4, 16])
        engine = Engine(EngineConfig(block_size=bs), StepCostModel(), PlainPool(10, bs), [])
        engine.g = rng.randrange(0, 1000)
        kv_lengths = [rng.randrange(1, 300) for _ in range(rng.randrange(1, 40))]
        for kv in kv_lengths:
            base = kv - engine.g
            engine.phase[base % bs] += 1
            engine.n_decode += 1
        for k in (1, 2, bs - 1, bs, bs + 3, 5 * bs + 2):
            if k < 1:
                continue
            # a step needs a new block when the KV length before it is a multiple of bs
            brute = sum(1 for kv in kv_lengths for t in range(k) if (kv + t) % bs == 0)
            assert engine.blocks_needed(k) == brute


def test_disaggregated_decode_side_recomputes_after_preemption() -> None:
    wl = synthetic(SyntheticSpec(requests=80, rate_rps=40, input_mean=200, output_mean=100, seed=6))
    cfg = EngineConfig(max_num_batched_tokens=512, max_num_seqs=32, block_size=16, num_blocks=120)
    run, _ = run_disaggregated(wl, cfg, StepCostModel(), HandOff(kv_bytes_per_token=1024))
    assert run.preemptions > 0
    assert len(run.records) == 80
    assert all(r.output_tokens == wl.requests[r.index].output_tokens for r in run.records)


@pytest.mark.parametrize(("cache", "policy"), [("hashed", "lpm"), ("radix", "fcfs")])
def test_analytic_jumps_equal_stepping_with_a_prefix_cache(cache: str, policy: str) -> None:
    wl = synthetic(SyntheticSpec(requests=300, rate_rps=20, input_mean=400, output_mean=80, groups=4,
                                 prefix_tokens=256, seed=8))
    cfg = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=24, block_size=16, num_blocks=500, policy=policy)
    fast, fast_pool = run_continuous(wl, cfg, StepCostModel(), cache)
    slow, slow_pool = run_continuous(wl, dataclasses.replace(cfg, analytic=False), StepCostModel(), cache)
    assert fast.jumps > 0 and fast_pool.counters.evictions > 0
    assert fast_pool.counters.as_dict() == slow_pool.counters.as_dict()
    assert [(r.index, r.cached_tokens, r.preemptions) for r in fast.records] == [
        (r.index, r.cached_tokens, r.preemptions) for r in slow.records]
    for a, b in zip(fast.records, slow.records, strict=True):
        assert a.finish_s == pytest.approx(b.finish_s, rel=1e-9, abs=1e-9)
