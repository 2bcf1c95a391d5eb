"""The benchmark's lean fake server: the client reproduces its timing, and it catches up in one write."""

from __future__ import annotations

import asyncio
import threading

import pytest
from lean_fake_server import LeanServer, _Connection, _Stream, _Ticker, _token_frames
from tiny_tokenizer import session_tokenizer

from harness.client import ClientConfig, plan_shares, read_records, run_client
from harness.client.sse import SSEParser
from harness.workload import Arrival, Common, make_workload

TTFT_S, GAP_S, TOKENS = 0.03, 0.005, 8


@pytest.fixture(scope="module")
def lean_url():
    """A lean server on an ephemeral port, on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    started: dict = {}
    ready = threading.Event()

    async def serve() -> None:
        server = await LeanServer(ttft_s=TTFT_S, gap_s=GAP_S).serve("127.0.0.1", 0)
        started["server"], started["port"] = server, server.sockets[0].getsockname()[1]
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{started['port']}"
    loop.call_soon_threadsafe(started["server"].close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_client_reproduces_injected_timing_over_keep_alive(lean_url, tmp_path_factory, api):
    tok = session_tokenizer(tmp_path_factory)
    w = make_workload("random", Common(arrival=Arrival("closed", concurrency=4), requests=12, input_tokens=10,
                                       output_tokens=TOKENS), {}, tok)
    out = tmp_path_factory.mktemp("lean") / "requests.jsonl"
    run = run_client(plan_shares(w.requests, ClientConfig(endpoint=lean_url, model="fake", api=api, timeout_s=10),
                                 str(out), workers=1, closed_concurrency=4, max_concurrency=None))
    recs = read_records(out)
    assert [r.status for r in recs] == ["length"] * 12
    assert run.stats[0].warm_connections == 4  # 12 requests over the 4 warm keep-alive connections
    for r in recs:
        assert r.completion_tokens == TOKENS and r.prompt_tokens == 10 and len(r.chunk_s) == TOKENS
        assert TTFT_S - 0.001 <= r.first_token_s - r.sent_s < TTFT_S + 0.05  # never early; late only by load
        # the timetable is absolute: the last token is due ttft + (n-1) gaps after the request arrived
        assert r.chunk_s[-1] - r.sent_s >= TTFT_S + (TOKENS - 1) * GAP_S - 0.001


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_overdue_tokens_go_out_in_one_write_and_never_early():
    loop = asyncio.new_event_loop()
    try:
        server = LeanServer(ttft_s=0.05, gap_s=0.01)
        conn = _Connection(server, _Ticker(loop))
        conn.transport = _Transport()
        token, _ = _token_frames("completions", "length")
        s = conn.stream = _Stream(conn, 100.0, 4, token, b"TAIL")
        conn.tick(s, 100.0705)  # tokens 0..2 due at 100.05, 100.06, 100.07; token 3 at 100.08 is not yet
        assert conn.transport.writes == [token * 3] and s.k == 3
        conn.tick(s, 100.08)
        assert conn.transport.writes[-1] == token + b"TAIL" and conn.stream is None
        size, event, _ = token.split(b"\r\n")  # one SSE event per HTTP chunk
        assert int(size, 16) == len(event) and SSEParser().feed(event)[0]["choices"][0]["text"] == " tok"
    finally:
        loop.close()


def test_a_lost_connection_drops_its_due_tokens():
    loop = asyncio.new_event_loop()
    try:
        conn = _Connection(LeanServer(ttft_s=0.05, gap_s=0.01), _Ticker(loop))
        conn.transport = _Transport()
        s = conn.stream = _Stream(conn, 0.0, 4, b"T", b"TAIL")
        conn.connection_lost(None)
        conn.tick(s, 1.0)
        assert conn.transport.writes == []
    finally:
        loop.close()
