"""Throughput over a steady-state window: the run's ramp (filling up) and drain (emptying) left out.

First send → last end divides by a span that starts with an empty server and ends with the last requests
finishing alone; over a short list those two phases dominate. The window:

- opens when the first wave has turned over: k = the requests sent up to the first completion (a closed loop's
  concurrency, an open loop's pipeline fill), and the window opens at the k-th completion;
- closes at the last send: after it the system only drains.

Inside it, request rate = completions ending in the window / its length; output tokens are counted where they
arrived — at each content chunk's time (its own token count from per-chunk usage, else the request's tokens
spread evenly over its chunks), and for a non-streamed request by clipping its span (sent → end) to the window
proportionally; prompt tokens at the request's first token (non-streamed: clipped with the output). Below
``MIN_WINDOW_S`` seconds, or with fewer than ``MIN_COMPLETIONS`` requests whose tokens fall inside it, the
figures are null with the reason; with fewer completions than that inside it (a server falling behind: tokens
flow, requests do not finish) only the request rate is null.
``drain_fraction`` = (last end − last send) / (last end − first send); ``ramp_fraction`` = (window start −
first send) / the same span.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.client.records import RequestRecord

MIN_WINDOW_S = 2.0
MIN_COMPLETIONS = 10
RULE = ("window from the k-th completion (k = requests sent up to the first completion: the first wave turned over) "
        "to the last send (after it the system only drains); completions ending inside it per second; tokens "
        "counted at their chunk's arrival (non-streamed: each request's span clipped to the window "
        f"proportionally); null below {MIN_WINDOW_S:g} s or {MIN_COMPLETIONS} requests with tokens inside, the "
        f"request rate also below {MIN_COMPLETIONS} completions inside")
__all__ = ["MIN_COMPLETIONS", "MIN_WINDOW_S", "RULE", "bounds", "steady_state", "window"]


def bounds(sent_s: Sequence[float], end_s: Sequence[float], k: int | None = None
           ) -> tuple[float, float, float, float] | None:
    """(first send, window start, last send, last end), or None when nothing was sent and ended; the window
    opens at the k-th completion (default: k = the requests sent up to the first completion)."""
    sent, ends = sorted(sent_s), sorted(end_s)
    if not sent or not ends:
        return None
    k = sum(s <= ends[0] for s in sent) if k is None else k
    return sent[0], ends[min(k, len(ends)) - 1], sent[-1], ends[-1]


def window(records: Sequence[RequestRecord]) -> tuple[float, float, float, float] | None:
    """``bounds`` of a run's records."""
    return bounds([r.sent_s for r in records if r.sent_s is not None],
                  [r.end_s for r in records if r.end_s is not None])


def _inside(lo: float, hi: float, t: float) -> bool:
    return lo < t <= hi


def _tokens(rec: RequestRecord, lo: float, hi: float, n_out: int) -> tuple[float, float]:
    """(output, prompt) tokens of one completed request that fall inside (lo, hi]."""
    n_in = rec.prompt_tokens if rec.prompt_tokens is not None else (rec.input_tokens or 0)
    if rec.chunk_s:
        n = len(rec.chunk_s)
        counts = rec.chunk_tokens if len(rec.chunk_tokens) == n else [n_out / n] * n
        out = float(sum(c for t, c in zip(rec.chunk_s, counts, strict=True) if _inside(lo, hi, t)))
        first = rec.first_token_s if rec.first_token_s is not None else rec.chunk_s[0]
        return out, float(n_in) if _inside(lo, hi, first) else 0.0
    sent, end = float(rec.sent_s or 0.0), float(rec.end_s or 0.0)
    share = (max(0.0, min(hi, end) - max(lo, sent)) / (end - sent) if end > sent else float(_inside(lo, hi, end)))
    return share * n_out, share * n_in


def steady_state(records: Sequence[RequestRecord], output_tokens: Callable[[RequestRecord], int], decimals: int
                 ) -> dict[str, Any] | None:
    """The ``throughput.steady_state`` object (module docstring), or None when nothing was sent and ended.

    ``output_tokens(rec)`` counts a request's output tokens (the measurement's definition).
    """
    span = window(records)
    if span is None:
        return None
    first, start, stop, last = span
    whole = last - first
    length = max(0.0, stop - start)
    done = [r for r in records if r.completed and r.sent_s is not None and r.end_s is not None]
    completions = sum(_inside(start, stop, float(r.end_s or 0.0)) for r in done)
    out: dict[str, Any] = {
        "rule": RULE, "start_s": round(start, 6), "end_s": round(stop, 6), "duration_s": round(length, 6),
        "requests": completions,
        "drain_fraction": round(min(1.0, max(0.0, last - stop) / whole), decimals) if whole > 0 else None,
        "ramp_fraction": round(min(1.0, max(0.0, start - first) / whole), decimals) if whole > 0 else None,
        "request_rate_rps": None, "output_tokens_per_s": None, "total_tokens_per_s": None, "null_reason": None,
    }
    if start >= stop:
        out["null_reason"] = ("no steady state: the first wave had not turned over by the last send (a list no "
                              "longer than its first wave, or a server falling behind from the start)")
        return out
    if length < MIN_WINDOW_S:
        out["null_reason"] = (f"steady-state window too short to mean anything: {length:.3g} s (needs >= "
                              f"{MIN_WINDOW_S:g} s)")
        return out
    tokens = [_tokens(r, start, stop, output_tokens(r)) for r in done]
    streaming = sum(1 for t in tokens if t[0] or t[1])
    if streaming < MIN_COMPLETIONS:
        out["null_reason"] = (f"steady-state window too short to mean anything: {streaming} requests had tokens "
                              f"inside its {length:.3g} s (needs >= {MIN_COMPLETIONS})")
        return out
    out_tok, in_tok = sum(t[0] for t in tokens), sum(t[1] for t in tokens)
    out.update(output_tokens_per_s=round(out_tok / length, decimals),
               total_tokens_per_s=round((out_tok + in_tok) / length, decimals))
    if completions < MIN_COMPLETIONS:  # tokens flowed, but few requests finished: a server falling behind
        out["null_reason"] = (f"request rate: only {completions} completions inside the {length:.3g} s window "
                              f"(needs >= {MIN_COMPLETIONS}; completions lag the sends); token rates counted at "
                              "their chunks")
    else:
        out["request_rate_rps"] = round(completions / length, decimals)
    return out
