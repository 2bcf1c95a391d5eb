"""Stream one request to an OpenAI-compatible server and turn it into a ``RequestRecord``.

Timeouts, disconnects, HTTP errors and cancellation each end in a termination status
(never a hang); whatever arrived before the end is kept in the record.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.client.http import ConnectionPool, HTTPProtocolError
from harness.client.records import RequestRecord
from harness.client.sse import DONE, SSEParser, interpret, load_payload
from harness.contract.jsonio import HugeInt, json_type
from harness.workload.model import Request

APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
T = TypeVar("T")
FINISH_STATUS = {"stop": "stop", "length": "length", "abort": "aborted", "aborted": "aborted", "eos": "stop"}


@dataclass(frozen=True)
class ClientConfig:
    """How requests are sent; one per run."""

    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    api: str = "completions"
    timeout_s: float = 600.0
    ignore_eos: bool = False  # ask the server to generate exactly output_tokens (vLLM/SGLang extension)
    min_tokens: bool = False  # also send min_tokens = output_tokens
    temperature: float = 0.0
    keep_text: bool = True  # store the generated text in the record (greedy agreement needs it)
    stream: bool = True  # False: one JSON answer per request (E2E and throughput only)
    per_chunk_usage: bool = True  # ask for usage on every chunk (vLLM/SGLang continuous_usage_stats)

    @property
    def url(self) -> str:
        return self.endpoint.rstrip("/") + APIS[self.api]


def build_payload(cfg: ClientConfig, req: Request) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": req.output_tokens,
        "temperature": cfg.temperature,
        "stream": cfg.stream,
    }
    if cfg.stream:
        body["stream_options"] = {"include_usage": True, **({"continuous_usage_stats": True} if cfg.per_chunk_usage
                                                             else {})}
    if cfg.api == "chat":
        body["messages"] = [dict(m) for m in req.messages] if req.messages is not None else [
            {"role": "user", "content": req.prompt or ""}]
    else:
        if req.prompt is None:
            raise ValueError(f"request {req.index} has chat messages; run it with api='chat'")
        body["prompt"] = req.prompt
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.min_tokens:
        body["min_tokens"] = req.output_tokens
    if req.priority is not None:  # vLLM's priority scheduling reads it (FCFS servers ignore it)
        body["priority"] = req.priority
    return body


class _Progress:
    """Mutable state of one stream; frozen into a record however the stream ends."""

    __slots__ = ("sent_s", "first_s", "end_s", "chunks", "text", "finish", "usage", "http_status", "done",
                 "chunk_tokens", "counted")

    def __init__(self) -> None:
        self.sent_s: float | None = None
        self.first_s: float | None = None
        self.end_s: float | None = None
        self.chunks: list[float] = []
        self.text: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.http_status: int | None = None
        self.done = False
        self.chunk_tokens: list[int | None] = []  # per content chunk, from the cumulative completion count
        self.counted = 0  # completion tokens the previous content chunks carried

    def count_chunk(self, usage: Any) -> None:
        """Tokens of the content chunk just appended: the growth of ``usage.completion_tokens`` since the last."""
        done = usage.get("completion_tokens") if type(usage) is dict else None
        if type(done) is int and done >= self.counted:
            self.chunk_tokens.append(done - self.counted)
            self.counted = done
        else:
            self.chunk_tokens.append(None)

    def chunk_counts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(tokens per chunk, characters per chunk): the first when every chunk was counted, else the second."""
        if self.chunk_tokens and None not in self.chunk_tokens:
            return tuple(self.chunk_tokens), ()  # type: ignore[arg-type]
        return (), tuple(len(t) for t in self.text)


MAX_SERVER_TOKENS = 10**9  # a per-request token count above this is not a count


def _token_count(value: Any, what: str, problems: list[str]) -> int | None:
    """A server-reported token count, or None (with the reason in ``problems``) when it is not one."""
    if value is None:
        return None
    if type(value) is float and value.is_integer():  # 12.0: a count, written as a float
        value = int(value)
    if type(value) is int and 0 <= value <= MAX_SERVER_TOKENS:
        return value
    if type(value) is HugeInt:
        shown = f"an integer of {value.digits} digits"
    else:
        try:
            shown = f"{json_type(value)} {json.dumps(value, default=str)[:40]}"
        except (ValueError, RecursionError):  # a deeply nested value: its type says enough
            shown = json_type(value)
    problems.append(f"{what} is {shown}, not a token count in [0, {MAX_SERVER_TOKENS}]")
    return None


def _usage(usage: Any, problems: list[str]) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) tokens from a usage block, each absent when it is not sane."""
    if usage is None:
        return None, None, None
    if type(usage) is not dict:
        problems.append(f"usage is {json_type(usage)}, not an object")
        return None, None, None
    prompt = _token_count(usage.get("prompt_tokens"), "usage.prompt_tokens", problems)
    completion = _token_count(usage.get("completion_tokens"), "usage.completion_tokens", problems)
    details = usage.get("prompt_tokens_details")
    if details is not None and type(details) is not dict:
        problems.append(f"usage.prompt_tokens_details is {json_type(details)}, not an object")
        details = None
    cached = _token_count((details or {}).get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens", problems)
    return prompt, completion, cached


def _text(value: str | None, what: str, problems: list[str]) -> str | None:
    """``value`` writable as UTF-8: a lone surrogate (from a ``\\ud800`` escape) becomes U+FFFD, noted."""
    if value is None or value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"{what} held lone UTF-16 surrogates, replaced by U+FFFD")
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def _record(req: Request, p: _Progress, status: str, error: str | None, *, scheduled_s: float | None,
            slot_s: float | None, worker: int, keep_text: bool) -> RequestRecord:
    problems: list[str] = []
    prompt, completion, cached = _usage(p.usage, problems)
    chunk_tokens, chunk_chars = p.chunk_counts()
    return RequestRecord(
        index=req.index, status=status, scheduled_s=scheduled_s, slot_s=slot_s, sent_s=p.sent_s,
        first_token_s=p.first_s, end_s=p.end_s, chunk_s=tuple(p.chunks), chunk_tokens=chunk_tokens,
        chunk_chars=chunk_chars if keep_text else (), input_tokens=req.input_tokens,
        output_tokens_requested=req.output_tokens, prompt_tokens=prompt, completion_tokens=completion,
        cached_tokens=cached, finish_reason=_text(p.finish, "finish_reason", problems), http_status=p.http_status,
        error=_text(error, "the error message", problems),
        output_text=_text("".join(p.text), "the output text", problems) if keep_text else None, worker=worker,
        server_data_error="; ".join(problems) or None,
        extra=_extra(req),
    )


def _extra(req: Request) -> dict[str, Any]:
    """What a record carries of its request beyond the index: priority, and session and turn in a session workload."""
    out: dict[str, Any] = {"priority": req.priority} if req.priority is not None else {}
    if req.conversation is not None and req.turn is not None:
        out.update(session=req.conversation, turn=req.turn)
    return out


class _StreamSink:
    """Body callback: SSE payloads into progress, timestamped at arrival; error bodies kept as text."""

    __slots__ = ("p", "t0", "parser", "error", "raw")

    def __init__(self, p: _Progress, t0: float) -> None:
        self.p, self.t0, self.parser = p, t0, SSEParser()
        self.error: str | None = None
        self.raw: list[bytes] = []  # body of a non-200 answer

    def __call__(self, data: bytes, now_abs: float) -> None:
        p = self.p
        if p.http_status is not None and p.http_status != 200:
            if len(self.raw) < 16:  # the head of an error body is enough; never buffer a runaway one
                self.raw.append(data)
            return
        now = now_abs - self.t0
        for payload in self.parser.feed(data):
            if payload is DONE:
                p.done = True
                continue
            text, finish, usage, error = interpret(payload)
            if error:
                self.error = self.error or error
                p.end_s = now
            if text:
                if p.first_s is None:
                    p.first_s = now
                p.chunks.append(now)
                p.text.append(text)
                p.count_chunk(usage)
                p.end_s = now
            if finish:
                p.finish = finish
            if usage is not None:
                p.usage = usage
        if self.parser.failure is not None:
            raise self.parser.failure  # the HTTP layer ends the request with it: status error


class _BodySink:
    """Body callback of a non-streamed request: the whole JSON answer, its last byte's arrival as the end."""

    __slots__ = ("p", "t0", "raw", "size")

    def __init__(self, p: _Progress, t0: float) -> None:
        self.p, self.t0, self.raw, self.size = p, t0, [], 0

    def __call__(self, data: bytes, now_abs: float) -> None:
        if self.size < MAX_ANSWER_BYTES:
            self.raw.append(data)
            self.size += len(data)
        self.p.end_s = now_abs - self.t0

    def finish(self) -> str | None:
        """Fill the progress from the answer; an error message when it is not a completion."""
        answer = load_payload(b"".join(self.raw).strip())  # MalformedStream (a ValueError) when it is not JSON
        if type(answer) is dict and type(answer.get("choices")) is list and answer["choices"]:
            choice = answer["choices"][0]
            message = choice.get("message") if type(choice) is dict else None
            if type(message) is dict:  # chat: the answer's message, as a delta would have carried it
                answer = {**answer, "choices": [{**choice, "delta": message}]}
        text, finish, usage, error = interpret(answer)
        self.p.text, self.p.finish, self.p.usage, self.p.done = ([text] if text else []), finish, usage, True
        return error


MAX_ANSWER_BYTES = 64 * 1024 * 1024


async def _stream(pool: ConnectionPool, cfg: ClientConfig, body: bytes, t0: float, p: _Progress) -> str | None:
    """Run the request; return an error message (HTTP or in-stream) or None. Raises on transport errors."""
    sink: _StreamSink | _BodySink = _StreamSink(p, t0) if cfg.stream else _BodySink(p, t0)

    def on_send() -> None:
        p.sent_s = time.monotonic() - t0

    def on_head(status: int) -> None:
        p.http_status = status

    status, _ = await pool.request("POST", APIS[cfg.api], body, sink, on_send=on_send, on_head=on_head)
    if p.end_s is None:
        p.end_s = time.monotonic() - t0
    if status != 200:
        detail = b"".join(sink.raw)[:300].decode("utf-8", errors="replace").replace("\n", " ")
        return f"HTTP {status}: {detail}"
    return sink.finish() if isinstance(sink, _BodySink) else sink.error


async def _within(coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """``coro`` with a deadline, run inline: ``asyncio.wait_for`` (3.11) wraps it in a task, which costs a
    loop iteration before the request is even sent — at a thousand streams, a few ms per request."""
    if hasattr(asyncio, "timeout"):  # Python 3.11+
        async with asyncio.timeout(timeout_s):
            return await coro
    return await asyncio.wait_for(coro, timeout_s)


async def send_request(pool: ConnectionPool, cfg: ClientConfig, req: Request, t0: float, *,
                       scheduled_s: float | None, slot_s: float | None = None, worker: int = 0,
                       extra: dict[str, Any] | None = None) -> RequestRecord:
    """Send ``req`` and return its record (``extra`` added to the record's); ``CancelledError`` propagates after
    the record is built (it is attached to the exception as ``record``)."""
    p = _Progress()
    body = json.dumps(build_payload(cfg, req)).encode("utf-8")

    def done(status: str, error: str | None = None) -> RequestRecord:
        rec = _record(req, p, status, error, scheduled_s=scheduled_s, slot_s=slot_s, worker=worker,
                      keep_text=cfg.keep_text)
        if extra:
            rec.extra.update(extra)
        return rec

    try:
        error = await _within(_stream(pool, cfg, body, t0, p), cfg.timeout_s)
    except asyncio.CancelledError as exc:
        exc.record = done("cancelled" if p.sent_s is not None else "not_sent", "cancelled by the client")  # type: ignore[attr-defined]
        raise
    except asyncio.TimeoutError:
        return done("timeout", f"no complete response within {cfg.timeout_s:g} s")
    except HTTPProtocolError as exc:  # the server's bytes are not HTTP (bad status line, chunk size, length)
        return done("error", f"{type(exc).__name__}: {exc}")
    except ConnectionError as exc:
        status = "disconnected" if p.http_status == 200 else "error"
        return done(status, f"{type(exc).__name__}: {exc}")
    except OSError as exc:  # connection refused, unreachable host, TLS failure
        return done("error", f"{type(exc).__name__}: {exc}")
    except ValueError as exc:  # MalformedStream: a data: payload that is not JSON or of the wrong shape
        return done("error", f"malformed stream: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the request gets its one record
        return done("error", f"client error: {type(exc).__name__}: {exc}")
    if error is not None:
        return done("error", error)
    if p.finish is None and not p.done:
        return done("disconnected", "stream ended without a finish reason or [DONE]")
    return done(FINISH_STATUS.get(p.finish or "stop", "stop"))
