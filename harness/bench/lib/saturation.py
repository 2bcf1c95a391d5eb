"""Saturation from queue growth: does a load level keep up, and between which levels does the server stop?

A server that keeps up with Poisson arrivals at rate lambda has a stationary queue: its outstanding requests,
its TTFT and its E2E latency (both from the scheduled send, MLPerf's definition) fluctuate around a level. Past its
capacity mu the queue grows linearly: outstanding requests at lambda - mu per second, latency by (lambda - mu) / mu
seconds per second. The queue may grow on either side of the engine: an engine that admits prefills first (vLLM)
keeps TTFT flat while its running batch, TPOT and E2E grow, so TTFT alone can miss saturation; the backlog
(arrivals minus completions) and E2E see both sides. All three slopes are fractions of the load left unserved, so one
``tolerance`` judges them. Each slope is fitted over ``windows`` consecutive time windows of the level's scheduled
span (window means absorb the short-range correlation of neighbouring requests) with a t interval on the slope:

- keeps up: the TTFT and backlog intervals lie at or below ``tolerance``;
- falls behind: any of the three lies wholly above it (E2E closes a level only this way: its window means carry
  the spread of output lengths, so on the simulated engine it straddled the tolerance at 0.75 of the capacity
  where the backlog read keeps up);
- undetermined: an interval straddles it (too short a level, or the level sits at the capacity), or the level
  has fewer than ``MIN_VERDICT_REQUESTS`` requests: too few to read a slope from (its slopes are still reported).

Validity is read by direction. A level the client sent late (send lag, achieved rate) ran at a lower load than its
scheduled rate: if its queue still grew, the scheduled rate is past saturation too, so it closes the bracket from
above (``LATE_FALLS_BEHIND``); if it kept up, it says nothing (unread). A level invalid for any other reason is unread
either way. The saturation bracket is [the highest level that kept up below the first that fell behind, that first
one], by scheduled rate (the rate the arrivals actually had: short Poisson lists run well below their nominal rate),
read from those levels only: an unread level between its ends widens nothing and blocks nothing. It is undetermined
where no level fell behind or none kept up below it, or a level above it kept up again; citing benches then fall
back to their own probe. The closed-loop capacity is the completion rate over the steady-state window of a
refilling loop: from the moment the loop is full to the last send, ramp and drain left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.serving.steady import bounds

KEEPS_UP, FALLS_BEHIND, UNDETERMINED, INVALID = "keeps up", "falls behind", "undetermined", "invalid"
LATE_FALLS_BEHIND = "falls behind (sent late)"  # invalid by late sends only, and its queue still grew
WINDOWS = 10
# two-sided 95 % quantiles of Student's t by degrees of freedom (windows - 2); above 10, 2.228 is conservative
# The fewest requests a level needs for a verdict (the issue's and bench-66's default floor). On the simulated engine
# (tests/bench/test_saturation.py) a level at 0.75 of the sustained capacity was read as falling behind in 18 % of
# 300 draws at 30 requests, 4 % at 60, 1.3 % at 80 and 0.7 % at 100: a short level is mostly the queue filling up
# from empty. At 0.4 of it, 2.7 % at 16 requests.
MIN_VERDICT_REQUESTS = 100
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


@dataclass(frozen=True)
class Slope:
    """An OLS slope over window means, with its t interval."""

    value: float
    low: float
    high: float
    windows: int


@dataclass(frozen=True)
class Timeline:
    """One level's requests on one clock: scheduled send, first token and end (None where it never came)."""

    scheduled_s: tuple[float, ...]
    first_token_s: tuple[float | None, ...]
    end_s: tuple[float | None, ...]

    @property
    def span_s(self) -> float:
        return max(self.scheduled_s) - min(self.scheduled_s) if len(self.scheduled_s) > 1 else 0.0


@dataclass(frozen=True)
class QueueGrowth:
    scheduled_rps: float | None
    span_s: float
    requests: int
    ttft_slope: Slope | None  # s of TTFT per s of arrivals
    backlog_slope: Slope | None  # outstanding requests per s, divided by the scheduled rate
    verdict: str
    e2e_slope: Slope | None = None  # s of E2E per s of arrivals: decode-side queueing that TTFT may not show

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scheduled_rate(scheduled_s: Sequence[float]) -> float | None:
    """Arrivals per second over the scheduled span: (n - 1) / (last - first)."""
    if len(scheduled_s) < 2 or max(scheduled_s) <= min(scheduled_s):
        return None
    return (len(scheduled_s) - 1) / (max(scheduled_s) - min(scheduled_s))


def window_slope(t: Sequence[float], y: Sequence[float], span: tuple[float, float], windows: int = WINDOWS
                 ) -> Slope | None:
    """Slope of mean y against mean t of ``windows`` equal time windows over ``span`` (empty ones dropped), with
    its 95 % t interval."""
    ta, ya = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    edges = np.linspace(span[0], span[1], windows + 1)
    which = np.clip(np.searchsorted(edges, ta, side="right") - 1, 0, windows - 1)
    centres = [float(ta[which == k].mean()) for k in range(windows) if np.any(which == k)]
    means = [float(ya[which == k].mean()) for k in range(windows) if np.any(which == k)]
    if len(means) < 3:
        return None
    x, m = np.asarray(centres), np.asarray(means)
    dx = x - x.mean()
    slope = float(dx @ (m - m.mean()) / (dx @ dx))
    residual = m - m.mean() - slope * dx
    df = len(means) - 2
    stderr = float(np.sqrt(residual @ residual / df / (dx @ dx)))
    half = T975.get(df, T975[10]) * stderr
    return Slope(slope, slope - half, slope + half, len(means))


def outstanding(line: Timeline) -> list[float]:
    """Requests scheduled and not yet ended at each scheduled send (a request that never ended counts)."""
    ends = np.sort(np.asarray([np.inf if e is None else e for e in line.end_s], dtype=float))
    sched = np.sort(np.asarray(line.scheduled_s, dtype=float))
    return [float(np.searchsorted(sched, t, side="right") - np.searchsorted(ends, t, side="right"))
            for t in line.scheduled_s]


def queue_growth(line: Timeline, tolerance: float, windows: int = WINDOWS) -> QueueGrowth:
    """The level's TTFT and backlog slopes and its verdict by the rule in the module docstring."""
    rate, span = scheduled_rate(line.scheduled_s), (min(line.scheduled_s), max(line.scheduled_s))
    done = [(s, f - s) for s, f in zip(line.scheduled_s, line.first_token_s, strict=True) if f is not None]
    ttft = window_slope([s for s, _ in done], [d for _, d in done], span, windows) if rate else None
    ended = [(s, e - s) for s, e in zip(line.scheduled_s, line.end_s, strict=True) if e is not None]
    e2e = window_slope([s for s, _ in ended], [d for _, d in ended], span, windows) if rate else None
    backlog = window_slope(line.scheduled_s, outstanding(line), span, windows) if rate else None
    if backlog is not None and rate:
        backlog = Slope(backlog.value / rate, backlog.low / rate, backlog.high / rate, backlog.windows)
    slopes = [s for s in (ttft, backlog) if s is not None]
    if not slopes or len(line.scheduled_s) < MIN_VERDICT_REQUESTS:
        verdict = UNDETERMINED
    elif any(s.low > tolerance for s in (*slopes, *([e2e] if e2e else []))):
        verdict = FALLS_BEHIND
    elif all(s.high <= tolerance for s in slopes):
        verdict = KEEPS_UP
    else:
        verdict = UNDETERMINED
    return QueueGrowth(rate, line.span_s, len(line.scheduled_s), ttft, backlog, verdict, e2e)


@dataclass(frozen=True)
class Level:
    """A timed level as the bracket sees it."""

    label: str
    scheduled_rps: float
    verdict: str  # KEEPS_UP, FALLS_BEHIND, LATE_FALLS_BEHIND, UNDETERMINED or INVALID


@dataclass(frozen=True)
class Bracket:
    low: Level | None  # the highest level that kept up below ``high``
    high: Level | None  # the first (lowest-rate) level that fell behind
    determined: bool
    reason: str

    @property
    def text(self) -> str:
        lo = f"{self.low.scheduled_rps:.3g}" if self.low else "below the sweep"
        hi = f"{self.high.scheduled_rps:.3g}" if self.high else "above the sweep"
        return f"[{lo}, {hi}] req/s" + ("" if self.determined else f" undetermined: {self.reason}")

    def to_dict(self) -> dict[str, Any]:
        return {"low": asdict(self.low) if self.low else None, "high": asdict(self.high) if self.high else None,
                "low_rps": self.low.scheduled_rps if self.low else None,
                "high_rps": self.high.scheduled_rps if self.high else None,
                "determined": self.determined, "reason": self.reason, "text": self.text}


def bracket(levels: Sequence[Level]) -> Bracket:
    """[last level that kept up, first that fell behind] by scheduled rate, from the levels read (module docstring)."""
    ordered = sorted(levels, key=lambda lv: lv.scheduled_rps)
    high = next((lv for lv in ordered if lv.verdict in (FALLS_BEHIND, LATE_FALLS_BEHIND)), None)
    below = [lv for lv in ordered if high is None or lv.scheduled_rps < high.scheduled_rps]
    low = next((lv for lv in reversed(below) if lv.verdict == KEEPS_UP), None)
    if high is None:
        unread = [lv.label for lv in ordered if lv.verdict == UNDETERMINED]
        invalid = [lv.label for lv in ordered if lv.verdict == INVALID]
        if invalid:  # an invalid level may well have fallen behind: it says nothing either way
            return Bracket(low, None, False, f"no level read fell behind and {len(invalid)} invalid "
                           f"({', '.join(invalid)}): the run cannot place saturation")
        return Bracket(low, None, False, f"no level fell behind and {len(unread)} undetermined (too short to read, "
                       f"fewer than {MIN_VERDICT_REQUESTS} requests, or at the capacity)" if unread else
                       "no level fell behind: the sweep ends below saturation")
    if low is None:
        return Bracket(None, high, False, "no level below the first that fell behind kept up")
    above = [lv.label for lv in ordered if lv.scheduled_rps > high.scheduled_rps and lv.verdict == KEEPS_UP]
    if above:
        return Bracket(low, high, False, f"levels above it kept up again ({', '.join(above)}): not monotone")
    return Bracket(low, high, True, "")


def steady_throughput(sent_s: Sequence[float], end_s: Sequence[float | None], concurrency: int
                      ) -> tuple[float | None, float]:
    """(completions/s, window s) of a refilling closed loop between the loop filling up (its ``concurrency``-th
    completion) and the last send: the measurement's steady-state window (``harness.serving.steady``)."""
    ends = [e for e in end_s if e is not None]
    span = bounds(sent_s, ends, concurrency) if len(ends) > concurrency else None
    if span is None:
        return None, 0.0
    _, start, stop, _ = span
    done = sum(start < e <= stop for e in ends)
    return (done / (stop - start) if stop > start and done else None), max(0.0, stop - start)
