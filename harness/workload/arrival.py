"""Arrival processes: every request's send offset, written into the workload file.

Offsets start at 0 for the first request and accumulate inter-arrival gaps drawn
from a local ``random.Random`` (Mersenne Twister; its ``expovariate`` and
``gammavariate`` are pure Python, so the same seed gives the same schedule on every
machine and Python version). A closed loop has no offsets (None): the client sends
the next request as soon as one of ``concurrency`` slots frees.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from harness.contract.jsonio import is_finite_number
from harness.errors import InvalidInput
from harness.workload.model import OFFSET_DECIMALS

PROCESSES = ("closed", "poisson", "gamma", "constant", "trace")
MAX_CONCURRENCY = 1_000_000


@dataclass(frozen=True)
class Arrival:
    process: str
    rate_rps: float | None = None
    burstiness: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.process not in PROCESSES:
            raise InvalidInput(
                f"unknown arrival process {self.process!r}", hint=f"choose one of: {', '.join(PROCESSES)}"
            )
        # Checked whatever the process: a given value is written into the header.
        for flag, value in (("--rate", self.rate_rps), ("--burstiness", self.burstiness)):
            if value is not None and not (is_finite_number(value) and value > 0):
                raise InvalidInput(f"{flag} {value}: must be a finite number > 0")
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"--concurrency {self.concurrency}: must be in [1, {MAX_CONCURRENCY}]")
        if self.process in ("poisson", "gamma", "constant") and self.rate_rps is None:
            raise InvalidInput(f"--arrival {self.process} needs --rate > 0 (requests per second)")
        if self.process == "gamma" and self.burstiness is None:
            raise InvalidInput("--arrival gamma needs --burstiness > 0 (1 = Poisson, < 1 burstier, > 1 smoother)")
        if self.process == "closed" and self.concurrency is None:
            raise InvalidInput("--arrival closed needs --concurrency >= 1")

    def to_header(self) -> dict:
        out: dict = {"process": self.process}
        if self.rate_rps is not None:
            out["rate_rps"] = self.rate_rps
        if self.burstiness is not None:
            out["burstiness"] = self.burstiness
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        return out


def offsets(arrival: Arrival, count: int, seed: int, trace_s: list[float] | None = None) -> list[float | None]:
    """Send offsets in seconds (None for every request of a closed loop)."""
    if arrival.process == "closed":
        return [None] * count
    if arrival.process == "trace":
        if trace_s is None or len(trace_s) != count:
            raise InvalidInput("--arrival trace needs a trace with one timestamp per request (kind 'trace')")
        start = min(trace_s)
        return [round(t - start, OFFSET_DECIMALS) for t in trace_s]
    times = drawn(arrival, count, seed)
    if times and not math.isfinite(times[-1]):  # a rate so small that its gaps overflow a float
        raise InvalidInput(f"--rate {arrival.rate_rps:g}: send offsets overflow; use a larger rate")
    return [round(t, OFFSET_DECIMALS) for t in times]


def drawn(arrival: Arrival, count: int, seed: int) -> list[float]:
    """The send times of an open arrival (poisson, gamma, constant) as drawn, before rounding."""
    rng = random.Random(seed)
    rate = float(arrival.rate_rps)  # type: ignore[arg-type]
    out: list[float] = []
    t = 0.0
    for i in range(count):
        if i > 0:
            if arrival.process == "constant":
                t += 1.0 / rate
            elif arrival.process == "poisson":
                t += rng.expovariate(rate)
            else:  # gamma with mean gap 1/rate: shape = burstiness, scale = 1/(rate*burstiness)
                b = float(arrival.burstiness)  # type: ignore[arg-type]
                t += rng.gammavariate(b, 1.0 / (rate * b))
        out.append(t)
    return out


def scheduled(arrival: Arrival, count: int, seed: int) -> Arrival:
    """``arrival`` (poisson or gamma) with its nominal rate moved so that its list of ``count`` requests, drawn from
    ``seed``, is *scheduled* at ``arrival.rate_rps``: its n - 1 gaps span (n - 1) / rate_rps. A short list runs well
    off its nominal rate by chance (10-15 % for a Poisson list of 60 s, a third for 8 gamma arrivals of shape 0.25),
    and lists that share their draws (one seed) are all off alike. A gap is its draw times 1 / rate, so scaling the
    nominal rate by the list's own unit-rate span keeps every draw and moves the span to the rate asked for."""
    unit_span = drawn(replace(arrival, rate_rps=1.0), count, seed)[-1] if count >= 2 else None
    if not unit_span:  # one request, or every draw 0: no span to schedule
        return arrival
    return replace(arrival, rate_rps=arrival.rate_rps * unit_span / (count - 1))  # type: ignore[operator]


def rescheduled(arrival: Arrival, count: int, seed: int, redraw_seed: int) -> Arrival:
    """``arrival`` (poisson or gamma) moved so that its list of ``count`` requests drawn from ``redraw_seed`` is
    scheduled at the rate its list drawn from ``seed`` runs at, (n - 1) / span: a redraw of a list made by
    ``scheduled`` runs at the rate that list was asked for, not at the rate that scaled the other draws."""
    span = drawn(arrival, count, seed)[-1] if count >= 2 else None
    if not span:
        return arrival
    return scheduled(replace(arrival, rate_rps=(count - 1) / span), count, redraw_seed)


def poisson_scheduled(rate_rps: float, seconds: float, seed: int, at_least: int = 2) -> tuple[Arrival, int]:
    """A Poisson arrival and request count whose list, drawn from ``seed``, is scheduled at ``rate_rps``
    (``scheduled``) and spans at least ``seconds``, with at least ``at_least`` requests."""
    count = max(2, at_least, math.ceil(rate_rps * seconds) + 1)
    return scheduled(Arrival("poisson", rate_rps=rate_rps), count, seed), count
