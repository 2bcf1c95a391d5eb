"""Validity per request and per figure: a client stall excludes only the requests whose figures it could move.

A *stall* is a wake-up of a client process's event loop later than the run's loop-lag limit (the limit its P99 is
judged against: ``lag_fraction`` of TTFT P99, never below the floor), kept by the loop-lag monitor with its start
(when the wake-up was due) and end (when it ran) on the run clock (``harness.client.runner``). While its loop is held,
a client process stamps nothing: a first token, a chunk or a stream end that came during the stall is stamped when
the loop wakes. So a stall can move only the requests its own process was driving, and of those only the figures
that read a timestamp it held (stamped inside it or within ``HOLD_SLACK_S`` after it), by up to the time from the
stall's start to that stamp:

- ``ttft``: the send and the first token (TTFT, counted from ready: a send the stall held came late, and so did
  everything after it); a stall after the first token cannot move it;
- ``decode``: the first token and the end (TPOT); a stall in mid-stream cannot move it (the server kept generating
  and the client read the buffered chunks when it woke);
- ``chunks``: every chunk (ITL);
- ``e2e``: the send and the end (E2E, counted from ready);
- ``run``: the run's rates (throughput), judged by the loop-lag P99 over the run (a P99 past the limit means the
  loop was late past it in 1 % of wake-ups: the client was held long enough to move a rate).

A send later than the send-lag limit (judged over ``min_lag_samples`` sends, as the run rule is) adds its lag to its
own request's TTFT and E2E, which count from ready, and is excluded from those (not from its decode).

A request is excluded from a figure when a stall held one of its timestamps by more than ``lag_fraction`` (5 %) of
what the figure is judged against (its TTFT, its decode, the chunk's gap, its E2E) — judged as every client lag is
(25 ms is nothing against a 10 s E2E and everything against a 50 ms TTFT); it is counted and named in the result. The
run stays valid for a figure while the excluded requests are at most ``MAX_EXCLUDED_SHARE`` of those that have it,
or one; past it (or, for its rates, past the loop-lag P99 limit) it is invalid for that figure, with the reason.
Where the excursions were not kept (an older client, or more than the monitor keeps), the run is judged by its
loop-lag P99 as a whole (``harness.serving.validity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.client.records import RequestRecord

SPANS = ("ttft", "decode", "chunks", "e2e")
SPAN_TEXT = {"ttft": "time to first token", "decode": "decode (first token to end)", "chunks": "chunk gaps",
             "e2e": "whole life", "run": "rates over the run"}
HOLD_SLACK_S = 0.01  # a timestamp this soon after a stall's end may be one the stall held
# A share of a run's requests that may be left out of a figure: dropping a share s of n samples keeps the median of
# the rest between the full sample's quantiles 0.5 - s/2 and 0.5 + s/2, and a decision must read the same with them
# put back (``harness.bench.exclusion``) or it is capped
MAX_EXCLUDED_SHARE = 0.25  # or one request, whatever the run's size: a lone request left out never voids a run
STALL_REASON = "client stalls"  # how every reason of this rule starts (``harness.bench.invalid`` matches it)


@dataclass(frozen=True)
class Stall:
    """One loop excursion of one client process, seconds on the run clock."""

    worker: int
    start_s: float
    end_s: float

    @property
    def ms(self) -> float:
        return (self.end_s - self.start_s) * 1e3


def readings(rec: RequestRecord) -> dict[str, list[tuple[str, float, float]]]:
    """By span, the timestamps a completed request's figures read (named) and the length each is judged against: a
    stall can move a figure only by holding one of them (stamped when the loop woke, not when the event came)."""
    ready = rec.slot_s if rec.slot_s is not None else rec.scheduled_s if rec.scheduled_s is not None else rec.sent_s
    if not rec.completed or ready is None or rec.end_s is None:
        return {}
    # a send the stall held moved everything after it: TTFT and E2E count from ready, before the send
    sent = [("send", rec.sent_s)] if rec.sent_s is not None and rec.sent_s > ready else []
    out = {"e2e": [(name, t, rec.end_s - ready) for name, t in (*sent, ("end", rec.end_s))]}
    first = rec.first_token_s
    if first is not None:
        out.update(ttft=[(name, t, first - ready) for name, t in (*sent, ("first token", first))],
                   decode=[("first token", first, rec.end_s - first), ("end", rec.end_s, rec.end_s - first)])
    out["chunks"] = [("chunk", t, t - prev) for prev, t in zip(rec.chunk_s, rec.chunk_s[1:], strict=False)]
    return out


def held(t: float, stall: Stall) -> float:
    """How far ``stall`` may have moved a timestamp stamped at ``t``: from the stall's start to ``t`` when ``t`` lies
    in it or just after it (``HOLD_SLACK_S``: the callbacks that queued behind it run then), else 0."""
    return t - stall.start_s if stall.start_s <= t <= stall.end_s + HOLD_SLACK_S else 0.0


def excluded_requests(records: Sequence[RequestRecord], stalls: Sequence[Stall], stall_ms: float,
                      late_ms: float | None, fraction: float) -> dict[str, dict[int, str]]:
    """By span, the requests to leave out and why: a stall past ``stall_ms`` of their own process held a timestamp
    the span's figures read by more than ``fraction`` of what it is judged against, or (``ttft`` and ``e2e``) they
    were sent more than ``late_ms`` late."""
    out: dict[str, dict[int, str]] = {span: {} for span in SPANS}
    judged = [s for s in stalls if s.ms > stall_ms]
    for rec in records:
        parts = readings(rec)
        mine = [s for s in judged if s.worker == rec.worker]
        for span, stamps in parts.items():
            hit = next(((s, name, t, held(t, s), length) for s in mine for name, t, length in stamps
                        if held(t, s) > fraction * length), None)
            if hit is not None:
                stall, name, t, moved, length = hit
                out[span][rec.index] = (f"client stall {stall.start_s:.3f}-{stall.end_s:.3f} s ({stall.ms:.0f} ms) "
                                        f"held its {name} at {t:.3f} s: up to {moved * 1e3:.0f} ms of "
                                        f"{length * 1e3:.0f} ms")
        lag_ms = (rec.send_lag_s or 0.0) * 1e3
        if parts and late_ms is not None and lag_ms > late_ms:
            for span in ("ttft", "e2e"):
                out[span].setdefault(rec.index, f"sent {lag_ms:.1f} ms late (> {late_ms:.1f} ms)")
    return out


def stall_validity(records: Sequence[RequestRecord], stalls: Sequence[Stall], *, stall_ms: float,
                   late_ms: float | None, fraction: float = 0.05, run_reason: str | None = None) -> dict[str, Any]:
    """``details.client.stalls``: the stalls judged, the requests excluded per span (named), the run's validity per
    figure, and a reason for each figure past its limit (reasons start with ``STALL_REASON``); ``run_reason``: the
    loop-lag P99's verdict on the run's rates (``harness.serving.validity.stall_record``)."""
    excluded = excluded_requests(records, stalls, stall_ms, late_ms, fraction)
    reasons, valid_for, share = [], {}, {}
    for span in SPANS:
        have = sum(1 for r in records if readings(r).get(span))
        share[span] = round(len(excluded[span]) / have, 4) if have else 0.0
        valid_for[span] = len(excluded[span]) <= max(1, MAX_EXCLUDED_SHARE * have)
        if not valid_for[span]:
            reasons.append(f"{STALL_REASON} (or late sends) moved the {SPAN_TEXT[span]} of "
                           f"{len(excluded[span])} of {have} requests ({share[span]:.0%} > {MAX_EXCLUDED_SHARE:.0%}): "
                           "too many to leave out of those figures")
    valid_for["run"] = run_reason is None
    reasons += [run_reason] if run_reason else []
    judged = [s for s in stalls if s.ms > stall_ms]
    return {"recorded": True, "stall_ms": round(stall_ms, 3), "late_send_ms": late_ms, "overlap_fraction": fraction,
            "stalls": [{"worker": s.worker, "start_s": round(s.start_s, 4), "end_s": round(s.end_s, 4),
                        "ms": round(s.ms, 1)} for s in judged[:64]],
            "stalls_judged": len(judged),
            "excluded": {span: [{"index": i, "why": why} for i, why in sorted(excluded[span].items())]
                         for span in SPANS},
            "excluded_share": share, "limits": {"max_excluded_share": MAX_EXCLUDED_SHARE, "min_excluded_allowed": 1},
            "valid_for": valid_for, "reasons": reasons}


def excluded_names(stalls: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """Each excluded request once, named with the parts of its life it is left out of and why."""
    if not stalls or not stalls.get("recorded"):
        return []
    spans: dict[int, list[str]] = {}
    why: dict[int, str] = {}
    for span in SPANS:
        for entry in stalls["excluded"].get(span, []):
            spans.setdefault(entry["index"], []).append(span)
            why.setdefault(entry["index"], entry["why"])
    return [f"{prefix}request {i} ({', '.join(spans[i])}): {why[i]}" for i in sorted(spans)]
