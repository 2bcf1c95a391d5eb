"""Session workloads: ShareGPT and synthetic turns, run so that each turn resends the server's real replies."""

from __future__ import annotations

import json

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.cli import main
from harness.client.sessions import messages_digest
from harness.errors import InvalidInput
from harness.serving.measure import MeasureConfig, measure
from harness.workload import Arrival, Common, load_workload, make_workload, write_workload

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "ka lo mi nu re sa"}, {"from": "gpt", "value": "FILE ONE"},
                                  {"from": "human", "value": "to vi ba de"}, {"from": "gpt", "value": "FILE TWO"},
                                  {"from": "human", "value": "fo gu pe ri zu"}]},
    {"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "an th ch"},
                                  {"from": "gpt", "value": "FILE THREE"}, {"from": "human", "value": "sa sa to"}]},
]


@pytest.fixture
def sharegpt(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    return path


def _sessions(tokenizer_dir, path, kind="sessions", arrival=None, **opts):
    return make_workload(kind, Common(arrival=arrival or Arrival("closed", concurrency=2), output_tokens=6),
                         {"conversations": str(path), **opts}, tokenizer_dir)


def test_sharegpt_turns_keep_the_user_text_and_drop_the_file_replies(tokenizer_dir, sharegpt):
    w = _sessions(tokenizer_dir, sharegpt, think_time="const:0.2")
    assert [(r.conversation, r.turn) for r in w.requests] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert [r.messages for r in w.requests][:2] == [({"role": "user", "content": "ka lo mi nu re sa"},),
                                                    ({"role": "user", "content": "to vi ba de"},)]
    assert all("FILE" not in m["content"] for r in w.requests for m in r.messages)
    assert [r.think_s for r in w.requests] == [None, 0.2, 0.2, None, 0.2]
    assert w.header["sessions"] == {"sessions": 2, "turns": 5, "max_turns": 3, "history": "real",
                                    "source": "sharegpt", "think_time": "const:0.2"}
    assert w.header["generator"]["conversations_sha256"].startswith("sha256:")
    assert w.header["paired_with"] == "sessions-fresh"


def test_sessions_start_by_the_arrival_process(tokenizer_dir):
    w = make_workload("sessions", Common(arrival=Arrival("poisson", rate_rps=2.0), input_tokens=8, output_tokens=4),
                      {"sessions": 3, "turns": 2, "think_time": "exp:0.5"}, tokenizer_dir)
    starts = [r.offset_s for r in w.requests if r.turn == 0]
    assert starts == sorted(starts) and starts[0] == 0.0 and len(set(starts)) == 3
    assert all(r.offset_s == starts[r.conversation] for r in w.requests)  # a later turn's lower bound
    twin = make_workload("sessions-fresh", Common(arrival=Arrival("poisson", rate_rps=2.0), input_tokens=8,
                                                  output_tokens=4),
                         {"sessions": 3, "turns": 2, "think_time": "exp:0.5"}, tokenizer_dir)
    assert [(r.offset_s, r.think_s, r.messages) for r in twin.requests] == \
        [(r.offset_s, r.think_s, r.messages) for r in w.requests]


@pytest.mark.parametrize("content, message", [
    ({"conversations": "x"}, "is a JSON list"),
    ([{"conversations": [{"from": "alien", "value": "x"}]}], "conversation 0, message 0: needs \"from\""),
    ([{"turns": []}], "conversation 0: no \"conversations\" list"),
    ([{"conversations": [{"from": "gpt", "value": "only a reply"}]}], "no conversation with a user turn"),
])
def test_malformed_conversation_files(tokenizer_dir, tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    out = tmp_path / "w.jsonl"
    code = main(["workload", "make", "sessions", "--conversations", str(path), "--concurrency", "1",
                 "--tokenizer", str(tokenizer_dir), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_bad_think_time_is_refused(tokenizer_dir):
    with pytest.raises(InvalidInput, match="--think-time"):
        make_workload("sessions", Common(arrival=Arrival("closed", concurrency=1)), {"think_time": "normal:1"},
                      tokenizer_dir)


def _measure(srv, path, out, **kw):
    return measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=path, out_dir=out, api="chat",
                                 semantic_id="INF-PREFIX-CACHE", run_label="sessions/test", **kw))


def test_each_turn_resends_the_server_replies_after_its_think_time(tokenizer_dir, sharegpt, tmp_path):
    path = write_workload(tmp_path / "s.jsonl", _sessions(tokenizer_dir, sharegpt, think_time="const:0.1"))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002, reply=" ok")) as srv:
        outcome = _measure(srv, path, tmp_path / "run")
        bodies = srv.bodies
    assert outcome.valid
    recs = {(r.extra["session"], r.extra["turn"]): r for r in outcome.records}
    second = next(b["messages"] for b in bodies if b["messages"][-1]["content"] == "to vi ba de")
    assert second == [{"role": "user", "content": "ka lo mi nu re sa"},
                      {"role": "assistant", "content": recs[(0, 0)].output_text},
                      {"role": "user", "content": "to vi ba de"}]
    assert recs[(0, 0)].output_text == " ok" * 6
    assert recs[(0, 1)].extra["messages_sha256"] == messages_digest(second)  # the record names what was sent
    for s, t in ((0, 1), (0, 2), (1, 1)):
        # the think time (asyncio may wake within its clock resolution)
        assert recs[(s, t)].sent_s - recs[(s, t - 1)].end_s >= 0.099
        assert recs[(s, t)].prompt_tokens > recs[(s, t - 1)].prompt_tokens
    turns = outcome.result["details"]["sessions"]
    assert [row["turn"] for row in turns["by_turn"]] == [0, 1, 2]
    assert turns["by_turn"][0]["ttft_ms"]["n"] == 2 and turns["sessions_stopped"] == 0
    assert turns["per_session"][0]["prompt_tokens_sent"] == [recs[(0, t)].prompt_tokens for t in range(3)]


def test_the_fresh_twin_resends_a_shuffled_history(tokenizer_dir, tmp_path):
    common = Common(arrival=Arrival("closed", concurrency=1), input_tokens=40, output_tokens=8)
    opts = {"sessions": 2, "turns": 3}
    real = write_workload(tmp_path / "real.jsonl", make_workload("sessions", common, opts, tokenizer_dir))
    fresh = write_workload(tmp_path / "fresh.jsonl", make_workload("sessions-fresh", common, opts, tokenizer_dir))
    rates = {}
    for name, path in (("real", real), ("fresh", fresh)):
        with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, reply=" ok")) as srv:
            outcome = _measure(srv, path, tmp_path / name)
        rates[name] = [row["prefix_hit_rate"] for row in outcome.result["details"]["sessions"]["by_turn"]]
    assert rates["real"][0] == 0 < rates["real"][1] < rates["real"][2]  # the history grows, and is reused
    assert rates["fresh"][1] < rates["real"][1] and rates["fresh"][2] < rates["real"][2]


def test_a_failed_turn_stops_its_session_and_says_so(tokenizer_dir, sharegpt, tmp_path):
    path = write_workload(tmp_path / "s.jsonl", _sessions(tokenizer_dir, sharegpt, arrival=Arrival("closed",
                                                                                                   concurrency=1)))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.005, gap_s=0.001, fail_every=2)) as srv:
        outcome = _measure(srv, path, tmp_path / "run")
    status = {(r.extra.get("session"), r.extra.get("turn")): r for r in outcome.records}
    assert status[(0, 0)].status == "length" and status[(0, 1)].status == "error"
    assert status[(0, 2)].status == "not_sent" and "session 0 ended error" in status[(0, 2)].error
    assert outcome.result["details"]["sessions"]["per_session"][0]["stopped_at_turn"] == 1
    assert not outcome.valid


def test_cli_make_and_show_sessions(tokenizer_dir, sharegpt, tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["workload", "make", "sessions", "--conversations", str(sharegpt), "--format", "sharegpt",
                 "--think-time", "uniform:0.5:2", "--arrival", "poisson", "--rate", "1",
                 "--tokenizer", str(tokenizer_dir), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["workload", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "sessions: history real" in shown and "sessions: think time uniform:0.5:2" in shown
    assert load_workload(out).header["sessions"]["turns"] == 5
