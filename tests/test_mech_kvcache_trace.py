"""infkit mech kvcache replays a trace with the workload's block scaling: predicted hit rate vs the reuse ceiling."""

from __future__ import annotations

import json

from harness.mech.batching import engine_config
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.simulate import run_continuous
from harness.mech.engine.workload import from_workload
from harness.mech.kvcache import KvCacheConfig, run, trace_pair
from harness.workload import Arrival, Common, make_workload
from harness.workload.traceio import TraceSlice

ROWS = [{"timestamp": 0, "input_length": 1100, "output_length": 40, "hash_ids": [10, 11, 12]},
        {"timestamp": 500, "input_length": 1300, "output_length": 20, "hash_ids": [10, 11, 13]},
        {"timestamp": 1500, "input_length": 600, "output_length": 8, "hash_ids": [20, 21]},
        {"timestamp": 3000, "input_length": 900, "output_length": 16, "hash_ids": [10, 30]}]


def _trace(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_an_unconstrained_cache_reaches_the_ceiling_and_the_twin_hits_nothing(tmp_path):
    cfg = KvCacheConfig(trace=str(_trace(tmp_path)), trace_rescale=64, managers=("hashed",))
    out = run(cfg)
    trace = out.details["trace"]
    # 64-token trace blocks are whole 16-token KV blocks: every shared block can be hit
    assert trace["predicted_hit_rate"]["hashed"] == trace["reuse_ceiling"] > 0.3
    assert out.details["effects"]["hashed"]["hit_rate_unique"] == 0


def test_the_workload_file_replays_like_the_trace(tmp_path, tokenizer_dir):
    path = _trace(tmp_path)
    spec = TraceSlice(trace_format="mooncake", block_tokens=64)
    made = make_workload("trace", Common(arrival=Arrival("trace")),
                         {"trace": str(path), "trace_format": "mooncake", "block_tokens": 64}, tokenizer_dir)
    shared, _, ceiling = trace_pair(str(path), spec)
    ecfg = engine_config(KvCacheConfig())
    from_file = run_continuous(from_workload(made), ecfg, StepCostModel(), "hashed")[1].counters.hit_rate()
    from_trace = run_continuous(shared, ecfg, StepCostModel(), "hashed")[1].counters.hit_rate()
    assert from_file == from_trace and round(from_file, 6) == ceiling == made.header["sharing"]["reuse_ceiling"]
