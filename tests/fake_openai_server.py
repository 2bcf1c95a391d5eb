"""An in-process fake OpenAI-compatible SSE server for the client's tests (the overhead benchmark's
default is the cheaper ``lean_fake_server.py``; this one with ``--server aiohttp``).

It streams ``/v1/completions`` and ``/v1/chat/completions`` with a configured TTFT,
per-token gap and jitter (on an absolute timetable, so server-side lag does not
accumulate), and injects faults by request ordinal: HTTP errors, in-stream errors,
stalls and mid-stream disconnects, or a crash that stops answering altogether; and
misbehaves on purpose: a usage block sent verbatim (NaN, strings, lists, ...), a raw
malformed ``data:`` payload in the middle of every stream, or raw ``/metrics`` text.
``/metrics`` exposes vLLM- or SGLang-named Prometheus series, including a small
block-hash prefix cache so hit rates are real numbers.

Run standalone: ``python tests/fake_openai_server.py --port 8123 --ttft-ms 50 --gap-ms 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

# Injected crashes and drops make aiohttp log every aborted handler; they are the point, not news.
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

BLOCK_WORDS = 16
QUEUE_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


@dataclass
class FakeConfig:
    ttft_s: float = 0.02
    gap_s: float = 0.005
    prefill_s_per_token: float = 0.0  # added to the first token's delay per uncached prompt token
    jitter_s: float = 0.0  # uniform extra delay per token in [0, jitter_s]
    seed: int = 0
    fail_every: int = 0  # every Nth request (1-based ordinal) answers HTTP 500
    error_every: int = 0  # every Nth request sends an in-stream error payload after 2 tokens
    stall_every: int = 0  # every Nth request stops sending after 2 tokens and never ends
    disconnect_every: int = 0  # every Nth request drops the connection after 2 tokens
    crash_after: int = 0  # after N requests the server stops answering (connections dropped)
    finish_reason: str = "length"
    usage: bool = True
    metrics: str | None = "vllm"  # "vllm", "sglang" or None (no /metrics)
    spec_decode: bool = False
    queue_s: float = 0.0  # fake server-side queue time observed per request
    kv_capacity: int = 256  # requests that fill the fake KV cache
    usage_raw: bytes | None = None  # send these bytes verbatim as the usage chunk's "usage" value
    bad_chunk: bytes | None = None  # a raw `data:` payload sent after the first token; the stream then goes on
    metrics_raw: str | None = None  # serve this text as /metrics instead of the computed series
    max_running: int = 0  # requests served at once (0: unlimited); the rest wait, so TTFT grows with load
    tokens_per_chunk: int = 1  # tokens each chunk carries (speculative decoding sends several), one gap_s apart
    reply: str = " tok"  # the text of one generated token
    served_model: str | None = None  # GET /v1/models lists it (as vLLM does: id, root, max_model_len); None: health
    stall_after_health: int = 0  # after N answered health checks, every endpoint accepts and then sends nothing
    stall_after: int = 0  # after N completion requests arrived, every endpoint accepts and then sends nothing


@dataclass
class _State:
    requests: int = 0
    running: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    queue_sum_s: float = 0.0
    queue_counts: list = field(default_factory=lambda: [0] * (len(QUEUE_BUCKETS_S) + 1))
    blocks: set = field(default_factory=set)
    crashed: bool = False
    health_checks: int = 0


def _chunk(api: str, text: str | None, finish: str | None = None, usage: dict | None = None) -> bytes:
    if api == "chat":
        choice = {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    payload = {"id": "fake", "object": "chunk", "model": "fake", "choices": [choice],
               **({"usage": usage} if usage else {})}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class FakeOpenAIServer:
    """Start with ``start()`` (runs its own event loop in a thread), stop with ``stop()``."""

    def __init__(self, config: FakeConfig | None = None, port: int = 0):
        self.config = config or FakeConfig()
        self.port = port
        self.state = _State()
        self._rng = random.Random(self.config.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._responses: set[web.StreamResponse] = set()
        self._site: web.TCPSite | None = None
        self._slots: asyncio.Semaphore | None = None
        self.bodies: list[dict] = []  # every request body received, in order

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models if self.config.served_model else self._health)
        if self.config.metrics:
            app.router.add_get("/metrics", self._metrics)
        return app

    def _cache(self, words: list[str]) -> int:
        """Count leading 16-word blocks seen before (chained hashes, as vLLM's block hashes)."""
        h, hits, still_hit = b"", 0, True
        for start in range(0, len(words) - len(words) % BLOCK_WORDS, BLOCK_WORDS):
            h = hashlib.sha256(h + " ".join(words[start:start + BLOCK_WORDS]).encode()).digest()
            if still_hit and h in self.state.blocks:
                hits += BLOCK_WORDS
            else:
                still_hit = False
                self.state.blocks.add(h)
        return hits

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    def stalled(self) -> bool:
        cfg, st = self.config, self.state
        return bool((cfg.stall_after_health and st.health_checks >= cfg.stall_after_health)
                    or (cfg.stall_after and st.requests >= cfg.stall_after))

    async def _health(self, request: web.Request) -> web.Response:
        if self.state.crashed:
            raise ConnectionResetError
        if self.stalled():
            await asyncio.sleep(3600)
        self.state.health_checks += 1
        return web.json_response({"ok": True})

    async def _models(self, request: web.Request) -> web.Response:
        await self._health(request)
        return web.json_response({"object": "list", "data": [{"id": self.config.served_model, "object": "model",
                                                              "root": f"/models/{self.config.served_model}",
                                                              "max_model_len": 4096}]})

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        cfg, st = self.config, self.state
        if st.crashed:
            request.transport.abort()
            raise ConnectionResetError
        if self.stalled():
            await asyncio.sleep(3600)
        body = await request.json()
        self.bodies.append(body)
        st.requests += 1
        n = st.requests
        if cfg.crash_after and n > cfg.crash_after:
            self.crash()
            request.transport.abort()
            raise ConnectionResetError
        if cfg.fail_every and n % cfg.fail_every == 0:
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", ()))
        words = text.split()
        cached = self._cache(words)
        st.prompt_tokens += len(words)
        st.prefix_queries += len(words)
        st.prefix_hits += cached
        st.queue_sum_s += cfg.queue_s
        st.queue_counts[next((i for i, b in enumerate(QUEUE_BUCKETS_S) if cfg.queue_s <= b), len(QUEUE_BUCKETS_S))] += 1
        max_tokens = int(body.get("max_tokens") or 16)
        if cfg.max_running:
            self._slots = self._slots or asyncio.Semaphore(cfg.max_running)
            async with self._slots:
                return await self._respond(request, api, n, max_tokens, len(words), cached, body)
        return await self._respond(request, api, n, max_tokens, len(words), cached, body)

    async def _respond(self, request, api, n, max_tokens, prompt_tokens, cached, body) -> web.StreamResponse:
        st = self.state
        if body.get("stream") is False:
            return await self._whole(api, max_tokens, prompt_tokens, cached)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        self._responses.add(resp)
        st.running += 1
        try:
            await self._stream(request, resp, api, n, max_tokens, prompt_tokens, cached, body)
        finally:
            st.running -= 1
            self._responses.discard(resp)
        return resp

    async def _whole(self, api, max_tokens, prompt_tokens, cached) -> web.Response:
        """A non-streamed answer: every token's time, then one JSON body."""
        cfg = self.config
        await asyncio.sleep(cfg.ttft_s + cfg.gap_s * (max_tokens - 1))
        self.state.generation_tokens += max_tokens
        text = cfg.reply * max_tokens
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if api == "chat" else
                  {"index": 0, "text": text})
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens, "prompt_tokens_details": {"cached_tokens": cached}}
        return web.json_response({"id": "fake", "choices": [{**choice, "finish_reason": cfg.finish_reason}],
                                  "usage": usage})

    async def _stream(self, request, resp, api, n, max_tokens, prompt_tokens, cached, body) -> None:
        cfg, st = self.config, self.state
        start = time.monotonic() + cfg.prefill_s_per_token * max(0, prompt_tokens - cached)
        options = body.get("stream_options") or {}
        per_chunk = cfg.usage and options.get("include_usage") and options.get("continuous_usage_stats")
        sent = 0
        for k in range(-(-max_tokens // cfg.tokens_per_chunk)):
            due = start + cfg.ttft_s + k * cfg.gap_s + (self._rng.uniform(0, cfg.jitter_s) if cfg.jitter_s else 0.0)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if (k == 2 and cfg.stall_every and n % cfg.stall_every == 0) or (k and self.stalled()):
                await asyncio.sleep(3600)
            if k == 2 and cfg.disconnect_every and n % cfg.disconnect_every == 0:
                request.transport.abort()
                return
            if k == 2 and cfg.error_every and n % cfg.error_every == 0:
                await resp.write(b'data: {"error": {"message": "injected stream error", "code": 500}}\n\n')
                return
            if k == 1 and cfg.bad_chunk is not None:
                await resp.write(b"data: " + cfg.bad_chunk + b"\n\n")
            carried = min(cfg.tokens_per_chunk, max_tokens - sent)
            sent += carried
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
            token = _chunk(api, cfg.reply * carried, usage=usage if per_chunk else None)
            await resp.write(token)
            st.generation_tokens += carried
        await resp.write(_chunk(api, None, cfg.finish_reason))
        if cfg.usage_raw is not None:
            await resp.write(b'data: {"id": "fake", "choices": [], "usage": ' + cfg.usage_raw + b"}\n\n")
        elif cfg.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": max_tokens,
                "total_tokens": prompt_tokens + max_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            await resp.write(b"data: " + json.dumps({"id": "fake", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.state.crashed:
            raise ConnectionResetError
        if self.stalled():
            await asyncio.sleep(3600)
        text = self.config.metrics_raw if self.config.metrics_raw is not None else self.metrics_text()
        return web.Response(text=text, content_type="text/plain")

    def metrics_text(self) -> str:
        st, cfg = self.state, self.config
        if cfg.metrics == "sglang":
            return "\n".join(
                [
                    "# TYPE sglang:prompt_tokens_total counter",
                    f'sglang:prompt_tokens_total{{model_name="fake"}} {st.prompt_tokens}',
                    "# TYPE sglang:cached_tokens_total counter",
                    f'sglang:cached_tokens_total{{model_name="fake"}} {st.prefix_hits}',
                    "# TYPE sglang:token_usage gauge",
                    f'sglang:token_usage{{model_name="fake"}} {st.running / cfg.kv_capacity}',
                    "# TYPE sglang:num_running_reqs gauge",
                    f'sglang:num_running_reqs{{model_name="fake"}} {st.running}',
                    "",
                ]
            )
        lab = 'model_name="fake"'
        lines = [
            "# HELP vllm:prompt_tokens_total Prompt tokens.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {st.prompt_tokens}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {st.generation_tokens}",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{lab}}} {st.prefix_queries}",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{lab}}} {st.prefix_hits}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{lab}}} 0",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {st.running}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {st.running / cfg.kv_capacity}",
            "# TYPE vllm:request_queue_time_seconds histogram",
        ]
        cum = 0
        for bound, count in zip((*QUEUE_BUCKETS_S, "+Inf"), st.queue_counts, strict=False):
            cum += count
            lines.append(f'vllm:request_queue_time_seconds_bucket{{{lab},le="{bound}"}} {cum}')
        lines += [
            f"vllm:request_queue_time_seconds_sum{{{lab}}} {st.queue_sum_s}",
            f"vllm:request_queue_time_seconds_count{{{lab}}} {cum}",
        ]
        if cfg.spec_decode:
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{lab}}} {st.generation_tokens // 4}",
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {st.generation_tokens}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {st.generation_tokens // 2}",
            ]
        return "\n".join(lines) + "\n"

    def crash(self) -> None:
        """Stop answering: stop listening, drop every open stream, cut keep-alive connections."""
        self.state.crashed = True
        if self._site is not None and self._site._server is not None:  # noqa: SLF001 - test double
            self._site._server.close()  # noqa: SLF001
        for resp in list(self._responses):
            if resp._req is not None and resp._req.transport is not None:  # noqa: SLF001 - test double
                resp._req.transport.abort()

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_port=True, backlog=4096)
        await site.start()
        self._site = site
        self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the bound ephemeral port

    def start(self) -> FakeOpenAIServer:
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()
            # Finish every handler (stalled ones included) before the loop closes.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="fake-openai-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        try:
            fut.result(10)
        except Exception:  # noqa: BLE001 - best effort shutdown of a test double
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    args = ap.parse_args()
    server = FakeOpenAIServer(
        FakeConfig(ttft_s=args.ttft_ms / 1e3, gap_s=args.gap_ms / 1e3, jitter_s=args.jitter_ms / 1e3), port=args.port
    )

    async def serve() -> None:
        await server._start()  # noqa: SLF001
        print(f"ready {server.url}", flush=True)
        await asyncio.Event().wait()

    try:
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve())
        else:
            uvloop.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
