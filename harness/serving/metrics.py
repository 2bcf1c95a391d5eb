"""Records → the result's performance group. Pure: no clock, no I/O, no printing.

Definitions (docs/measurement.md), over requests that completed (status ``stop`` or ``length``):

- TTFT = first content chunk − sent.
- E2E = last content chunk (or stream end) − sent.
- TPOT (per request) = (E2E − TTFT) / (output_tokens − 1), only when output_tokens > 1.
- ITL = gaps between successive content chunks, pooled over requests (``itl_ms``, also ``itl_chunk_ms``).
- Per-token ITL (``itl_token_ms``) = each chunk gap divided by the tokens that chunk carried, one value
  per token: a chunk of k tokens after a gap g gives k values g/k. Counts come from the server's
  per-chunk usage, else from the tokenizer over each chunk's text (``chunk_tokens_source`` says which).
- Non-streamed requests have no first token: TTFT, TPOT and ITL are null with the reason.
- output_tokens = the server's ``usage.completion_tokens``; the count of content chunks
  when the server sent no usage.
- Client queue wait = sent − scheduled, over every request that was sent.
- Duration = first send → last end over all requests; rates divide by it. ``throughput.steady_state`` holds
  the same rates over the steady-state window, ramp and drain left out, with the drain fraction
  (``harness.serving.steady``).
- TTFT and E2E from the scheduled send (MLPerf LoadGen's definition) = the same ends −
  scheduled; the client's own lateness counts against them. SLOs are judged on these.
- Goodput = completed requests meeting every stated SLO (``ttft_ms``, ``tpot_ms``,
  ``e2e_ms``, ``itl_ms`` as each request's worst gap; TTFT and E2E from the scheduled
  send) per second; ``slo_compliance`` counts the exceedances with a binomial upper bound.

Distributions are ``harness.contract.distribution.distribution_ms`` (linear-interpolated
percentiles, recorded as ``percentile_method: "linear"``), rounded to ``DECIMALS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from harness.client.records import RequestRecord
from harness.contract.distribution import PERCENTILE_METHOD, distribution_ms, slo_compliance
from harness.serving.steady import steady_state

__all__ = ["DECIMALS", "PERCENTILE_METHOD", "SLO_KEYS", "from_scheduled", "meets_slo", "output_tokens", "per_request",
           "performance"]

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")
DECIMALS = 4


def distribution(values_ms: Sequence[float]) -> dict[str, Any] | None:
    """A ``distribution_ms`` object at this module's rounding, or None for no values."""
    return distribution_ms(values_ms, DECIMALS)


def output_tokens(rec: RequestRecord) -> int:
    return rec.completion_tokens if rec.completion_tokens is not None else len(rec.chunk_s)


def per_request(rec: RequestRecord) -> dict[str, float | None]:
    """TTFT, E2E, TPOT and worst ITL (ms) of one sent and ended request, as defined above."""
    sent_s, end_s = rec.sent_s, rec.end_s
    if sent_s is None or end_s is None:
        raise TypeError(f"request {rec.index}: per_request needs a sent and ended request")
    ttft = (rec.first_token_s - sent_s) * 1e3 if rec.first_token_s is not None else None
    e2e = (end_s - sent_s) * 1e3
    n_out = output_tokens(rec)
    tpot = (e2e - ttft) / (n_out - 1) if ttft is not None and n_out > 1 else None
    gaps = np.diff(rec.chunk_s) * 1e3 if len(rec.chunk_s) > 1 else np.empty(0)
    return {"ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "itl_ms": float(gaps.max()) if gaps.size else None}


def from_scheduled(rec: RequestRecord, values: Mapping[str, float | None]) -> dict[str, float | None]:
    """``values`` with TTFT and E2E counted from the scheduled send (unchanged without a schedule)."""
    if rec.scheduled_s is None or rec.sent_s is None:
        return dict(values)
    wait = max(0.0, rec.sent_s - rec.scheduled_s) * 1e3
    return {**values, **{k: v + wait for k in ("ttft_ms", "e2e_ms") if (v := values.get(k)) is not None}}


TokenEnds = Callable[[str], list[int]]  # the character offset where each token of a text ends


def chunk_token_counts(rec: RequestRecord, token_ends: TokenEnds | None = None) -> tuple[list[int] | None, str | None]:
    """Tokens each content chunk carried and where the counts came from, or (None, None) when unknown."""
    n = len(rec.chunk_s)
    if n and len(rec.chunk_tokens) == n:
        return list(rec.chunk_tokens), "server_usage"
    if not (n and token_ends and rec.output_text is not None and len(rec.chunk_chars) == n):
        return None, None
    bounds = np.cumsum(rec.chunk_chars)
    counts = np.bincount(np.searchsorted(bounds, np.asarray(token_ends(rec.output_text)) - 1, side="right"),
                         minlength=n)[:n]
    return counts.tolist(), "tokenizer"


def token_gaps(chunk_s: Sequence[float], counts: Sequence[int]) -> list[float]:
    """Per-token ITL (ms) of one request: chunk k's gap over its ``counts[k]`` tokens (a chunk without tokens
    hands its gap on to the next)."""
    out: list[float] = []
    pending = 0.0
    for k in range(1, len(chunk_s)):
        pending += (chunk_s[k] - chunk_s[k - 1]) * 1e3
        if counts[k] > 0:
            out += [pending / counts[k]] * counts[k]
            pending = 0.0
    return out


def _itl_token(done: Sequence[RequestRecord], token_ends: TokenEnds | None) -> tuple[dict[str, Any] | None, str | None]:
    gaps: list[float] = []
    sources: set[str] = set()
    for rec in done:
        counts, source = chunk_token_counts(rec, token_ends)
        if counts is not None and source is not None:  # both or neither, by construction
            gaps += token_gaps(rec.chunk_s, counts)
            sources.add(source)
    return distribution(gaps), "+".join(sorted(sources)) or None


def meets_slo(values: Mapping[str, float | None], slo: Mapping[str, float]) -> bool:
    """A request meets the SLO when every stated bound holds; a value that does not apply passes."""
    return all((v := values.get(k)) is None or v <= bound for k, bound in slo.items())


def _throughput(done: Sequence[RequestRecord], scheduled: Sequence[Mapping[str, float | None]],
                slo: Mapping[str, float], duration_s: float) -> dict[str, Any]:
    """The throughput object over ``duration_s`` (first send to last end), goodput judged on ``scheduled``."""
    out_total = sum(output_tokens(r) for r in done)
    in_total = sum(r.prompt_tokens if r.prompt_tokens is not None else (r.input_tokens or 0) for r in done)
    out: dict[str, Any] = {
        "request_rate_rps": round(len(done) / duration_s, DECIMALS),
        "output_tokens_per_s": round(out_total / duration_s, DECIMALS),
        "total_tokens_per_s": round((in_total + out_total) / duration_s, DECIMALS),
        "duration_s": round(duration_s, 6),
        "goodput_rps": round(sum(meets_slo(p, slo) for p in scheduled) / duration_s, DECIMALS) if slo else None,
        "slo": slo or None,
    }
    if slo and scheduled:
        out["slo_compliance"] = slo_compliance([meets_slo(p, slo) for p in scheduled])
    return out


def performance(records: Sequence[RequestRecord], slo: Mapping[str, float] | None = None, *, streamed: bool = True,
                token_ends: TokenEnds | None = None) -> dict[str, Any]:
    """The performance group's client-side fields (server queue wait and memory are added by the caller).

    ``token_ends`` (a tokenizer) counts each chunk's tokens where the server sent no per-chunk usage.
    """
    slo = dict(slo or {})
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        raise ValueError(f"unknown SLO keys {unknown}; use {', '.join(SLO_KEYS)}")
    done = [r for r in records if r.completed and r.sent_s is not None and r.end_s is not None]
    per = [per_request(r) for r in done]
    scheduled = [from_scheduled(r, p) for r, p in zip(done, per, strict=True)]
    itl = [g for r in done for g in (np.diff(r.chunk_s) * 1e3).tolist()]
    sent = [r.sent_s for r in records if r.sent_s is not None]
    waits = [(r.sent_s - r.scheduled_s) * 1e3 for r in records if r.sent_s is not None and r.scheduled_s is not None]
    group: dict[str, Any] = {
        "percentile_method": PERCENTILE_METHOD,
        "ttft_ms": distribution([p["ttft_ms"] for p in per if p["ttft_ms"] is not None]),
        "tpot_ms": distribution([p["tpot_ms"] for p in per if p["tpot_ms"] is not None]),
        "itl_ms": distribution(itl),
        "e2e_ms": distribution([p["e2e_ms"] for p in per if p["e2e_ms"] is not None]),  # never None
        "queue_wait_client_ms": distribution([max(0.0, w) for w in waits]),
        "ttft_from_scheduled_ms": distribution([p["ttft_ms"] for p in scheduled if p["ttft_ms"] is not None]),
        "e2e_from_scheduled_ms": distribution([p["e2e_ms"] for p in scheduled if p["e2e_ms"] is not None]),
        "throughput": None,
        "null_reasons": {},
        "streamed": streamed,
    }
    group["itl_chunk_ms"] = group["itl_ms"]
    group["itl_token_ms"], group["chunk_tokens_source"] = _itl_token(done, token_ends)
    ends = [r.end_s for r in records if r.end_s is not None]
    if sent and ends and max(ends) > min(sent):
        group["throughput"] = _throughput(done, scheduled, slo, max(ends) - min(sent))
        group["throughput"]["steady_state"] = steady_state(records, output_tokens, DECIMALS)
    reasons = {
        "ttft_ms": "no request completed with generated text",
        "tpot_ms": "no completed request produced more than one output token",
        "itl_ms": "no completed request streamed more than one content chunk",
        "e2e_ms": "no request completed",
        "queue_wait_client_ms": "no request was sent",
        "ttft_from_scheduled_ms": "no request completed with generated text",
        "e2e_from_scheduled_ms": "no request completed",
        "throughput": "no request was sent and ended",
    }
    reasons["itl_chunk_ms"] = reasons["itl_ms"]
    reasons["itl_token_ms"] = reasons["itl_ms"] if group["itl_ms"] is None else (
        "the server sent no per-chunk usage and no tokenizer was given to count each chunk's tokens")
    if not streamed:
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "itl_chunk_ms", "itl_token_ms"):
            reasons[key] = "requests were not streamed (--no-stream): one answer, no first-token or chunk times"
    group["null_reasons"] = {k: why for k, why in reasons.items() if group[k] is None}
    return group
