"""The lean HTTP/1.1 layer: body framing under any read split, keep-alive reuse, stale connections."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.http import ConnectionPool, HTTPProtocolError, _Response

BODY = b'data: {"choices":[{"text":" a"}]}\n\ndata: {"choices":[{"text":" b"}]}\n\ndata: [DONE]\n\n'


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n" + \
    chunked([BODY[:30], BODY[30:41], BODY[41:]])


class _Transport:
    def __init__(self) -> None:
        self.written, self.closed = b"", False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    abort = close


def _feed(raw: bytes, cuts: list[int]) -> tuple[bytes, asyncio.Future, _Response]:
    loop = asyncio.new_event_loop()
    try:
        proto = _Response()
        proto.connection_made(_Transport())
        got: list[bytes] = []
        done = loop.create_future()
        proto.start(b"GET / HTTP/1.1\r\n\r\n", lambda data, now: got.append(data), done, None)
        edges = [0, *sorted(set(c for c in cuts if 0 < c < len(raw))), len(raw)]
        for a, b in zip(edges, edges[1:], strict=False):
            proto.data_received(raw[a:b])
        return b"".join(got), done, proto
    finally:
        loop.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CHUNKED)), max_size=20))
def test_chunked_body_survives_any_read_split(cuts):
    body, done, proto = _feed(CHUNKED, cuts)
    assert body == BODY and done.result() == 200 and proto.keep_alive


def test_every_single_byte_read():
    body, done, _ = _feed(CHUNKED, list(range(len(CHUNKED))))
    assert body == BODY and done.result() == 200


def test_content_length_and_chunk_extensions():
    raw = b'HTTP/1.1 400 Bad Request\r\nContent-Length: 13\r\n\r\n{"error":"x"}'
    body, done, proto = _feed(raw, [20, 50])
    assert (body, done.result(), proto.keep_alive) == (b'{"error":"x"}', 400, True)
    ext = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;name=v\r\nabc\r\n0\r\n\r\n"
    assert _feed(ext, [])[0] == b"abc"


def test_until_close_body_ends_at_connection_loss():
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + BODY
    body, done, proto = _feed(raw, [10])
    assert not done.done() and body == BODY and not proto.keep_alive
    proto.connection_lost(None)
    assert done.result() == 200


def test_bad_status_line_and_lost_connection_fail():
    _, done, proto = _feed(b"SPDY/9 nope\r\n\r\n", [])
    with pytest.raises(HTTPProtocolError, match="bad status line"):
        done.result()
    assert proto.transport.closed
    _, done, proto = _feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", [])
    proto.connection_lost(None)
    with pytest.raises(ConnectionResetError, match="mid-response"):
        done.result()


async def _serve(handler) -> tuple[asyncio.AbstractServer, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    return head + await reader.readexactly(length)


def test_pool_reuses_keep_alive_connections():
    connections = 0

    async def handler(reader, writer):
        nonlocal connections
        connections += 1
        try:
            while True:
                request = await _read_request(reader)
                assert b"Host: 127.0.0.1:" in request and request.endswith(b'{"x": 1}')
                writer.write(CHUNKED)
                await writer.drain()
        except asyncio.IncompleteReadError:
            writer.close()

    async def main():
        server, url = await _serve(handler)
        pool = ConnectionPool(url)
        got = []
        for _ in range(5):
            status, headers = await pool.request("POST", "/v1/completions", b'{"x": 1}', lambda d, t: got.append(d))
            assert status == 200 and headers["content-type"] == "text/event-stream"
        pool.close()
        server.close()
        await server.wait_closed()
        return b"".join(got)

    assert asyncio.run(main()) == BODY * 5
    assert connections == 1


def test_idle_connection_closed_by_the_server_is_retried_once():
    served = []

    async def handler(reader, writer):
        served.append(1)
        if len(served) == 1:  # the first connection is closed while idle, as a keep-alive timeout does
            writer.close()
            return
        await _read_request(reader)
        writer.write(CHUNKED)
        await writer.drain()
        writer.close()

    async def main():
        server, url = await _serve(handler)
        pool = ConnectionPool(url)
        assert await pool.warm(1) == 1
        await asyncio.sleep(0.05)
        got = []
        sends = []
        status, _ = await pool.request("POST", "/x", b"{}", lambda d, t: got.append(d), on_send=lambda: sends.append(1))
        pool.close()
        server.close()
        return status, b"".join(got), len(sends)

    status, body, sends = asyncio.run(main())
    assert (status, body) == (200, BODY) and 1 <= sends <= 2


def test_refused_connection_raises_oserror():
    async def main():
        await ConnectionPool("http://127.0.0.1:9").request("GET", "/", b"", lambda d, t: None)

    with pytest.raises(OSError):
        asyncio.run(main())
    with pytest.raises(ValueError, match="http"):
        ConnectionPool("ftp://x")
