"""A lean fake OpenAI streaming server for the client-overhead benchmark.

The benchmark's server runs on the same cores as the client it measures, so every
microsecond it spends per token is taken from the client. ``fake_openai_server.py``
(aiohttp, fault injection, ``/metrics``) costs about 17 µs of CPU per streamed token:
a task wake-up from ``asyncio.sleep`` and aiohttp's response writer per token. This
server speaks just enough HTTP/1.1 for the happy path — keep-alive ``POST`` to
``/v1/completions`` and ``/v1/chat/completions`` with a ``Content-Length`` body, a
chunked ``text/event-stream`` answer — and writes tokens straight to the transports
from one timer per millisecond: every token due in that millisecond is sent by the same
callback, so a token costs a list append and one ``write``, no task and no timer of its
own. The event loop's clock has millisecond resolution anyway (uvloop's timers are
libuv's); a token is never sent early, and at most 1 ms late plus the loop's lag. A
stream that fell behind sends its overdue tokens in one write.

Timing is the fake server's: the first token ``ttft`` after the request arrived, then
one every ``gap`` on an absolute timetable (lateness does not accumulate); the stream
then carries the finish chunk, the usage chunk when ``stream_options.include_usage``
asks for it, and ``[DONE]``, as vLLM does. Several processes can share one port
(``SO_REUSEPORT``); the kernel spreads connections over them.

    python tests/lean_fake_server.py --port 8123 --ttft-ms 50 --gap-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math

HEAD_END = b"\r\n\r\n"
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
PATHS = {b"/v1/completions": "completions", b"/v1/chat/completions": "chat"}


def _frame(event: bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(", ", ": ")).encode() + b"\n\n"


def _choice(api: str, text: str | None, finish: str | None) -> dict:
    if api == "chat":
        return {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
    return {"index": 0, "text": text or "", "finish_reason": finish}


def _token_frames(api: str, finish_reason: str) -> tuple[bytes, bytes]:
    """(one token's frame, the finish chunk's frame), built once per API."""
    def chunk(text: str | None, finish: str | None) -> bytes:
        return _frame(
            _event({"id": "fake", "object": "chunk", "model": "fake", "choices": [_choice(api, text, finish)]})
        )

    return chunk(" tok", None), chunk(None, finish_reason)


def _plain(status: str, text: str, *, close: bool = False) -> bytes:
    body = text.encode()
    conn = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        conn,
        body,
    )


class _Ticker:
    """Due tokens grouped by millisecond; one loop timer per millisecond that has any."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.due: dict[int, list[_Stream]] = {}

    def at(self, when_s: float, stream: _Stream) -> None:
        ms = math.ceil(when_s * 1e3)
        bucket = self.due.get(ms)
        if bucket is None:
            self.due[ms] = [stream]
            self.loop.call_at(ms / 1e3, self._fire, ms)
        else:
            bucket.append(stream)

    def _fire(self, ms: int) -> None:
        now_s = self.loop.time()
        for stream in self.due.pop(ms):
            stream.conn.tick(stream, now_s)


class _Stream:
    """One response in flight: its timetable and how far along it is."""

    __slots__ = ("conn", "start", "k", "n", "token", "tail")

    def __init__(self, conn: _Connection, start: float, n: int, token: bytes, tail: bytes) -> None:
        self.conn, self.start, self.k, self.n, self.token, self.tail = conn, start, 0, n, token, tail


class _Connection(asyncio.Protocol):
    """One keep-alive connection; answers one request at a time."""

    def __init__(self, server: LeanServer, ticker: _Ticker) -> None:
        self.server, self.ticker = server, ticker
        self.loop = ticker.loop
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio and uvloop set TCP_NODELAY

    def connection_lost(self, exc: Exception | None) -> None:
        self.stream = None  # a token still due for it finds it gone

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.stream is None:
            self._next_request()

    def _next_request(self) -> None:
        """Parse one complete request from the buffer and start answering it."""
        end = self.buf.find(HEAD_END)
        if end < 0:
            return
        lines = self.buf[:end].split(b"\r\n")
        method, path, *_ = lines[0].split(b" ") + [b"", b""]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return  # the body is still on its way
        body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
        api = PATHS.get(path.split(b"?", 1)[0])
        if method != b"POST" or api is None:
            self.transport.write(_plain("404 Not Found", "not found"))
            return self._next_request()
        try:
            self._start(api, json.loads(body))
        except (ValueError, TypeError, AttributeError) as exc:
            self.transport.write(_plain("400 Bad Request", f"bad request body: {exc}", close=True))
            self.transport.close()

    def _start(self, api: str, body: dict) -> None:
        srv = self.server
        text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", ()))
        prompt_tokens, n = len(text.split()), int(body.get("max_tokens") or 16)
        tail = srv.finish[api]
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n,
                "total_tokens": prompt_tokens + n,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
            tail += _frame(_event({"id": "fake", "choices": [], "usage": usage}))
        tail += _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.transport.write(STREAM_HEAD)
        s = self.stream = _Stream(self, self.loop.time(), n, srv.token[api], tail)
        self.ticker.at(s.start + srv.ttft_s, s)

    def tick(self, s: _Stream, now_s: float) -> None:
        """Send stream ``s``'s tokens due by ``now_s`` in one write (the tail after the last); queue the next.

        On time that is one token; a server that fell behind its timetable catches up with one write, as a
        real server's event loop does, instead of a write per overdue token.
        """
        if self.stream is not s:
            return  # the connection was lost
        srv, k = self.server, s.k + 1
        while k < s.n and s.start + srv.ttft_s + k * srv.gap_s <= now_s:
            k += 1
        data = s.token * (k - s.k)
        s.k = k
        if k < s.n:
            self.transport.write(data)
            self.ticker.at(s.start + srv.ttft_s + k * srv.gap_s, s)
            return
        self.transport.write(data + s.tail)
        self.stream = None
        if self.buf:
            self._next_request()


class LeanServer:
    """Serve on ``port`` (0: an ephemeral one) until the returned server is closed."""

    def __init__(self, *, ttft_s: float, gap_s: float, finish_reason: str = "length") -> None:
        self.ttft_s, self.gap_s = ttft_s, gap_s
        frames = {api: _token_frames(api, finish_reason) for api in ("completions", "chat")}
        self.token = {api: f[0] for api, f in frames.items()}
        self.finish = {api: f[1] for api, f in frames.items()}

    async def serve(self, host: str, port: int) -> asyncio.AbstractServer:
        ticker = _Ticker(asyncio.get_running_loop())
        return await ticker.loop.create_server(
            lambda: _Connection(self, ticker), host, port, reuse_port=True, backlog=4096
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    args = ap.parse_args()
    lean = LeanServer(ttft_s=args.ttft_ms / 1e3, gap_s=args.gap_ms / 1e3)

    async def serve() -> None:
        server = await lean.serve("127.0.0.1", args.port)
        port = server.sockets[0].getsockname()[1]
        print(f"ready http://127.0.0.1:{port}", flush=True)
        await server.serve_forever()

    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
