"""bench-69's real-traffic pairs: the plan they add, the trace claim as headline, and (slow) a real session run."""

from __future__ import annotations

import json

import pytest

from harness.bench.benches.bench69 import SESSIONS, SESSIONS_TWIN, TRACE, TRACE_TWIN, Config, plan
from harness.bench.spec import InputFile
from harness.client import read_records
from harness.client.sessions import messages_digest
from harness.errors import InvalidInput
from tests.bench_runs import EAGER, run_bench
from tests.typed_results import arm_result
from tests.vllm_cpu_model import prepared_model_or_skip

ROWS = [{"timestamp": 0, "input_length": 1100, "output_length": 40, "hash_ids": [10, 11, 12]},
        {"timestamp": 500, "input_length": 1300, "output_length": 20, "hash_ids": [10, 11, 13]}]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_a_trace_adds_its_pair_and_leads_the_claims(trace):
    p = plan(Config(trace=str(trace), trace_rescale=32), None)
    assert p.claims[0].treatment == TRACE and p.claims[0].baseline == TRACE_TWIN
    assert [c.metric.name for c in p.claims[:2]] == ["ttft_ms.p50", "ttft_ms.p99"]
    assert p.claims[-1].treatment == "shared-prefix/cache-on"  # the synthetic pair still runs, no longer headline
    made = {w.name: w for w in p.workloads}
    assert made["trace"].options["trace"] == InputFile("mooncake.jsonl", trace.read_text())  # signed as an input
    assert made["trace"].options["block_tokens"] == 32 and made["trace-unique"].options == made["trace"].options
    assert p.read is not None


def test_without_traffic_the_plan_is_the_synthetic_one():
    p = plan(Config(), None)
    assert [c.treatment for c in p.claims] == ["shared-prefix/cache-on"] and p.read is None
    assert dict(p.servers[0].settings) == {"prefix_caching": True}


def test_sessions_add_a_chat_pair_and_ask_for_cached_token_counts():
    p = plan(Config(sessions=2, synthetic=False), None)
    arms = {a.label: a for a in p.arms}
    assert set(arms) == {SESSIONS, SESSIONS_TWIN} and dict(arms[SESSIONS].client) == {"api": "chat"}
    assert "--enable-prompt-tokens-details" in p.servers[0].settings["extra_args"]
    assert p.claims[0].treatment == SESSIONS


@pytest.mark.parametrize("kw, message", [
    ({"synthetic": False}, "nothing to run"),
    ({"trace": "/no/such/trace"}, "no such file"),
    ({"trace_rescale": 4096}, "exceeds --max-model-len"),
])
def test_bad_traffic_configs_are_refused(trace, kw, message):
    kw = {**kw, "trace": str(trace)} if kw.get("trace_rescale") else kw
    with pytest.raises(InvalidInput, match=message):
        Config(**kw).check()


@pytest.mark.slow
def test_real_sessions_resend_the_server_replies_and_hit_more_with_each_turn(tmp_path):
    """Against the real vllm-cpu server: each turn carries the replies the server gave before, and the prefix
    hit rate rises with the turn index (the twin, resending a shuffled history, stays lower)."""
    prepared_model_or_skip()
    # 16 output tokens: a turn and its reply then fill the first 128-token KV block, which the next turn hits
    done = run_bench(tmp_path, "69", "INF-PREFIX-CACHE", "--no-synthetic", "--sessions", "2", "--session-turns", "3",
                     "--session-tokens", "96", "--output-tokens", "16", "--repeats", "1", "--warmup-requests", "1",
                     "--resamples", "300", EAGER)
    arm = done.run_dir / "arms" / SESSIONS.replace("/", ".") / "r1"
    workload = [json.loads(line) for line in (done.run_dir / "workloads" / "sessions.jsonl").read_text().splitlines()]
    users = {(r["conversation"], r["turn"]): r["messages"][0] for r in workload[1:]}
    recs = {(r.extra["session"], r.extra["turn"]): r for r in read_records(arm / "requests.jsonl")}
    assert all(r.completed for r in recs.values())
    for (s, t), rec in recs.items():
        sent = []
        for k in range(t):  # the conversation so far, with the replies the server actually gave
            sent += [users[(s, k)], {"role": "assistant", "content": recs[(s, k)].output_text}]
        assert rec.extra["messages_sha256"] == messages_digest([*sent, users[(s, t)]]), (s, t)
        if t:  # the server counted the earlier turns and their replies in this prompt
            assert rec.prompt_tokens > recs[(s, t - 1)].prompt_tokens + recs[(s, t - 1)].completion_tokens
    comparison = json.loads((done.run_dir / "comparison.json").read_text())
    by_turn = comparison["details"]["traffic"]["sessions_by_turn"]
    real = [row["prefix_hit_rate"] for row in by_turn[SESSIONS]]
    fresh = [row["prefix_hit_rate"] for row in by_turn[SESSIONS_TWIN]]
    assert real[0] < real[1] < real[2] and fresh[2] < real[2], (real, fresh)


def _run(label: str, repeat: int, hit_rate: float, ttft_s: float, turns: bool = False):
    from harness.bench.records import ArmRun
    from harness.client import RequestRecord

    recs = tuple(RequestRecord(index=i, status="length", scheduled_s=0.0, sent_s=0.0, first_token_s=ttft_s * (1 + i),
                               end_s=ttft_s * (1 + i) + 0.1, chunk_s=(ttft_s * (1 + i), ttft_s * (1 + i) + 0.1),
                               completion_tokens=2, prompt_tokens=100 * (1 + i), cached_tokens=40 * i,
                               extra={"session": 0, "turn": i} if turns else {}) for i in range(3))
    result = {"conclusion": {"failure": None, "valid": True},
              "details": {"server_metrics": {"prefix_cache": {"hit_rate": hit_rate}}}}
    return ArmRun(label, repeat, result_path=None, result=arm_result(result), records=recs, server="cache-on")


def test_the_reading_sets_measured_hit_rate_beside_ceiling_and_prediction(trace, tmp_path, tokenizer_dir):
    from harness.bench.records import Workload
    from harness.bench.spec import History
    from harness.workload import Arrival, Common, make_workload, write_workload

    cfg = Config(trace=str(trace), trace_rescale=128, sessions=1, synthetic=False, repeats=2, resamples=200)
    p = plan(cfg, None)
    opts = {"trace": str(trace), "trace_format": "mooncake", "block_tokens": 128}
    made = make_workload("trace", Common(arrival=Arrival("closed", concurrency=1)), opts, tokenizer_dir)
    path = write_workload(tmp_path / "trace.jsonl", made)
    runs = [_run(label, r, rate, ttft, turns="sessions" in label) for r in (1, 2) for label, rate, ttft in (
        (TRACE_TWIN, 0.0, 0.5), (TRACE, 0.4, 0.2), (SESSIONS_TWIN, 0.1, 0.5), (SESSIONS, 0.5, 0.3))]
    history = History(cfg=cfg, model=None, runs=runs, workloads={"trace": Workload(path, made.workload_id, 2)},
                      servers={"cache-on": {"effective": {"cache_config.block_size": 128}}})
    reading = p.read(history)
    got = reading.details["traffic"]["trace"]
    ceiling = made.header["sharing"]["reuse_ceiling"]
    assert got["reuse_ceiling"] == ceiling and got["measured_hit_rate"] == 0.4 and got["measured_hit_rate_twin"] == 0
    assert got["realised_share_of_ceiling"] == round(0.4 / ceiling, 6) and got["kv_block_tokens"] == 128
    assert 0 < got["predicted_hit_rate"] <= ceiling
    assert reading.effect.arm_b == TRACE and reading.effect.value == pytest.approx(0.4, rel=0.01)
    turns = reading.details["traffic"]["sessions_by_turn"][SESSIONS]
    assert [row["turn"] for row in turns] == [0, 1, 2] and turns[1]["prefix_hit_rate"] == 0.2
    assert any(line.startswith("trace: reuse ceiling") for line in reading.lines)
    assert any(line.startswith(f"{SESSIONS} by turn") for line in reading.lines)
