"""Validity per request and per figure: a client stall excludes the requests whose life it overlapped.

A *stall* is a wake-up of a client process's event loop later than the run's loop-lag limit (the limit its P99 is
judged against: ``lag_fraction`` of TTFT P99, never below the floor), kept by the loop-lag monitor with its start
(when the wake-up was due) and end (when it ran) on the run clock (``harness.client.runner``). A stall can move only
the figures of the requests its own process was driving while it lasted, and of those only the part of their life
it overlapped:

- ``ttft``: from ready (scheduled send, or the slot it waited for) to the first token: TTFT, client queue wait;
- ``decode``: from the first token to the end: TPOT, ITL;
- ``e2e``: ready to end: E2E;
- ``run``: the run's rates (throughput), judged by the loop-lag P99 over the run (a P99 past the limit
  means the loop was late past it in 1 % of wake-ups: the client was held long enough to move a rate).

A send later than the send-lag limit (judged over ``min_lag_samples`` sends, as the run rule is) adds its lag to its
own request's TTFT and E2E, which count from ready, and is excluded from those (not from its decode).

A request is excluded from the figures of each part of its life its stalls overlapped by more than ``lag_fraction``
(5 %) of that part's length — what they can move it by, judged as every client lag is (a 25 ms stall is nothing
against a 10 s E2E and everything against a 50 ms TTFT); it is counted and named in the result. The run stays valid
for a part while the excluded requests that have it are at most ``MAX_EXCLUDED_SHARE`` of them, or one; past it (or,
for its rates, past the loop-lag P99 limit) it is invalid for those figures, with the reason. Where the excursions
were not kept (an older client, or more than the monitor keeps), the run is judged by its loop-lag P99 as a whole
(``harness.serving.validity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.client.records import RequestRecord

SPANS = ("ttft", "decode", "e2e")
SPAN_TEXT = {"ttft": "time to first token", "decode": "decode (after the first token)", "e2e": "whole life",
             "run": "rates over the run"}
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


def windows(rec: RequestRecord) -> dict[str, tuple[float, float]]:
    """The parts of a completed request's life on the run clock, by span (none for one not sent or not ended)."""
    ready = rec.slot_s if rec.slot_s is not None else rec.scheduled_s if rec.scheduled_s is not None else rec.sent_s
    if not rec.completed or ready is None or rec.end_s is None:
        return {}
    out = {"e2e": (ready, rec.end_s)}
    if rec.first_token_s is not None:
        out.update(ttft=(ready, rec.first_token_s), decode=(rec.first_token_s, rec.end_s))
    return out


def excluded_requests(records: Sequence[RequestRecord], stalls: Sequence[Stall], stall_ms: float,
                      late_ms: float | None, fraction: float) -> dict[str, dict[int, str]]:
    """By span, the requests to leave out and why: stalls past ``stall_ms`` of their own process overlapped that part
    of their life by more than ``fraction`` of its length, or (``ttft`` and ``e2e``) they were sent more than
    ``late_ms`` late."""
    out: dict[str, dict[int, str]] = {span: {} for span in SPANS}
    judged = [s for s in stalls if s.ms > stall_ms]
    for rec in records:
        parts = windows(rec)
        mine = [s for s in judged if s.worker == rec.worker]
        for span, (a, b) in parts.items():
            hit = [s for s in mine if s.start_s < b and s.end_s > a]
            overlap = sum(min(b, s.end_s) - max(a, s.start_s) for s in hit)
            if hit and overlap > fraction * (b - a):
                first = hit[0]
                out[span][rec.index] = (f"client stall {first.start_s:.3f}-{first.end_s:.3f} s ({first.ms:.0f} ms)"
                                        + (f" and {len(hit) - 1} more" if len(hit) > 1 else "")
                                        + f", {overlap * 1e3:.0f} ms of its {(b - a) * 1e3:.0f} ms")
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
        have = sum(1 for r in records if span in windows(r))
        share[span] = round(len(excluded[span]) / have, 4) if have else 0.0
        valid_for[span] = len(excluded[span]) <= max(1, MAX_EXCLUDED_SHARE * have)
        if not valid_for[span]:
            reasons.append(f"{STALL_REASON} (or late sends) overlapped the {SPAN_TEXT[span]} of "
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
