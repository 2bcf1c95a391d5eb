"""A lean HTTP/1.1 client for streamed responses: keep-alive pool, callback-driven body.

Why not a general client: a streamed token costs one network read; a general client
then wakes a task, walks its stream-reader layers and hands bytes back through an
async iterator — about 20 µs per token in CPython, which at a few hundred streams makes
the client, not the server, set the latency. Here the transport's ``data_received``
callback decodes the body (Content-Length, chunked, or until close) and passes each
piece straight to a sink with the arrival time, so a token costs one callback.

Scope: ``POST``/``GET`` to one ``http``/``https`` origin, HTTP/1.1 keep-alive, no
proxies, redirects or compression (requests say ``Accept-Encoding: identity``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.parse
from collections.abc import Callable

Sink = Callable[[bytes, float], None]  # (body bytes, time.monotonic() at arrival)
MAX_HEAD_BYTES = 64 * 1024


class HTTPProtocolError(Exception):
    """The server's response is not valid HTTP/1.1."""


class _Response(asyncio.Protocol):
    """One connection's protocol; parses one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.on_head: Callable[[int], None] | None = None
        self._reset(None, None)

    def _reset(self, sink: Sink | None, done: asyncio.Future | None) -> None:
        self.sink, self.done = sink, done
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self._buf = b""
        self._mode = "head"  # head -> length | chunked | close -> end
        self._left = 0

    def start(self, request: bytes, sink: Sink, done: asyncio.Future, on_head: Callable[[int], None] | None) -> None:
        self._reset(sink, done)
        self.on_head = on_head
        self.transport.write(request)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is None or self.done.done():
            return
        if self._mode == "close":
            self._finish()
        else:
            self.done.set_exception(ConnectionResetError(f"connection closed mid-response{f': {exc}' if exc else ''}"))

    def _finish(self) -> None:
        self._mode = "end"
        if self.done is not None and not self.done.done():
            self.done.set_result(self.status)

    def _fail(self, message: str) -> None:
        self.keep_alive = False
        if self.done is not None and not self.done.done():
            self.done.set_exception(HTTPProtocolError(message))
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            self._receive(data)
        except Exception as exc:  # noqa: BLE001 - the sink refused a payload, or the response is not HTTP
            # Raised out of a transport callback it would be logged with a traceback and the stream
            # would end as a disconnect; it is this request's error instead.
            self.keep_alive = False
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc)
            if self.transport is not None:
                self.transport.close()

    def _receive(self, data: bytes) -> None:
        now = time.monotonic()
        if self.done is None:
            return  # bytes on an idle connection: nothing is waiting for them
        buf = self._buf + data if self._buf else data
        self._buf = b""
        if self._mode == "head":
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail("response head larger than 64 KiB")
                else:
                    self._buf = buf
                return
            if not self._head(buf[:end]):
                return
            buf = buf[end + 4:]
        if self._mode == "length":
            take = buf[: self._left]
            self._left -= len(take)
            if take:
                self.sink(take, now)
            if self._left == 0:
                self._finish()
        elif self._mode == "chunked":
            self._chunks(buf, now)
        elif self._mode == "close" and buf:
            self.sink(buf, now)

    def _head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            self._fail(f"bad status line {lines[0][:80]!r}")
            return False
        self.status = int(parts[1])
        if self.on_head is not None:
            self.on_head(self.status)
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        conn = self.headers.get("connection", "").lower()
        self.keep_alive = parts[0] == "HTTP/1.1" and "close" not in conn
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in self.headers:
            length = self.headers["content-length"]
            if not length.isdigit():
                self._fail(f"bad Content-Length {length[:20]!r}")
                return False
            self._mode, self._left = "length", int(length)
            if self._left == 0:
                self._finish()
        else:
            self._mode, self.keep_alive = "close", False
        return True

    def _chunks(self, buf: bytes, now: float) -> None:
        pos, n = 0, len(buf)
        while pos < n:
            if self._left > 0:  # inside a chunk's data
                take = buf[pos:pos + self._left]
                self._left -= len(take)
                pos += len(take)
                self.sink(take, now)
                if self._left == 0:
                    self._left = -2  # its CRLF follows
                continue
            if self._left == -2:
                if n - pos < 2:
                    break
                pos += 2
                self._left = 0
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size_text = buf[pos:eol]
            if b";" in size_text:
                size_text = size_text.split(b";", 1)[0]
            try:
                size = int(size_text, 16)
            except ValueError:
                self._fail(f"bad chunk size {size_text[:20]!r}")
                return
            if size == 0:  # last chunk; trailers are not used by streaming servers
                self._finish()
                return
            pos = eol + 2
            if pos + size + 2 <= n:  # the whole chunk and its CRLF arrived: a streamed event's usual case
                self.sink(buf[pos:pos + size], now)
                pos += size + 2
            else:
                self._left = size
        self._buf = buf[pos:] if pos < n else b""


class ConnectionPool:
    """Keep-alive connections to one origin; a connection serves one request at a time."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 30.0):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"need an http(s) base URL, got {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.prefix = url.path.rstrip("/")
        self.host_header = url.netloc
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Response] = []

    async def _connect(self) -> _Response:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(_Response, self.host, self.port, ssl=self.ssl), self.connect_timeout_s)
        return proto

    async def warm(self, connections: int) -> int:
        """Open up to ``connections`` idle connections; returns how many opened."""
        results = await asyncio.gather(*(self._connect() for _ in range(connections)), return_exceptions=True)
        opened = [r for r in results if isinstance(r, _Response)]
        self._idle.extend(opened)
        return len(opened)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes,
        sink: Sink,
        *,
        on_send: Callable[[], None] | None = None,
        on_head: Callable[[int], None] | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, str]]:
        """Send a request; body pieces go to ``sink`` as they arrive; returns (status, headers) at the end.

        Cancellation or an error closes the connection; a clean keep-alive one returns to the pool.
        """
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.host_header}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nAccept: text/event-stream\r\nAccept-Encoding: identity\r\n\r\n"
        )
        request = head.encode("latin-1") + body
        while True:
            conn, reused = self._take(), True
            if conn is None:
                conn, reused = await self._connect(), False
            done = asyncio.get_running_loop().create_future()
            if on_send is not None:
                on_send()
            conn.start(request, sink, done, on_head)
            try:
                status = await done
                break
            except ConnectionResetError:
                # A reused connection the server closed while idle (keep-alive timeout) fails
                # before any response byte; the request never reached it, so send it again.
                if reused and conn.status is None:
                    continue
                raise
            except BaseException:
                conn.transport.abort()
                raise
        if conn.keep_alive and not conn.closed:
            conn.done = None
            self._idle.append(conn)
        else:
            conn.transport.close()
        return status, conn.headers

    def _take(self) -> _Response | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    def close(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
