"""bench-70's load: the bursty list's rate and length and the closed-loop pair's B, as set, else from a measured
capacity (a GPU's: ``harness.bench.lib.gpuload``), else the CPU reference host's at the named size."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from harness.bench.lib.gpuload import Capacity
from harness.bench.lib.hostprofile import default_rate, default_size
from harness.errors import InvalidInput

if TYPE_CHECKING:
    from harness.bench.benches.bench70 import Config

# the bursty rate on the host the defaults are sized on (hostprofile's reference, the slowest of this kind): about
# 0.6 of what its base server sustains for these requests in a closed loop of 8
REFERENCE_RATE_RPS = 1.0
REFERENCE_REQUESTS = 16  # a list scheduled at the reference rate spans 15 s
REFERENCE_CONCURRENCY = 8  # the closed-loop pair's B on CPU backends
# on a GPU: the bursty rate is this share of the measured saturation rate (the reference rate's share of what the
# reference host's base server sustains), and its list spans the reference list's time
CAPACITY_SHARE = 0.6
REFERENCE_SPAN_S = (REFERENCE_REQUESTS - 1) / REFERENCE_RATE_RPS
# the open lists' floor: at 10 a throttled host at load scale 0.45 spanned 22 s a list and ran its bench 12 s over
# its target; at 8 the floor binds only below scale 0.5, and a list still holds 2 high-priority requests
MIN_REQUESTS = 8
# what a probed plan is built at before its probe has run (its arms are then made at the probed capacity)
STAND_IN = Capacity(REFERENCE_RATE_RPS / CAPACITY_SHARE, REFERENCE_CONCURRENCY, "a stand-in until the probe has run")


def arrival_rate(cfg: Config, capacity: Capacity | None = None) -> tuple[float, str]:
    """The bursty workload's mean rate: --rate-rps, else ``CAPACITY_SHARE`` of a measured capacity (a GPU's), else
    the reference rate at the named size."""
    if cfg.rate_rps is not None:
        return cfg.rate_rps, f"{cfg.rate_rps:g} req/s, set by --rate-rps"
    if capacity is not None:
        rate = round(CAPACITY_SHARE * capacity.rate_rps, 3)
        return rate, f"{rate:g} req/s = {CAPACITY_SHARE:g} x the saturation rate {capacity.rate_rps:g} req/s"
    return default_rate(REFERENCE_RATE_RPS, cfg.size)


def list_length(cfg: Config, capacity: Capacity | None = None) -> tuple[int, str]:
    """Requests per arm: --requests, else on a measured capacity as many as span the reference list's time at its
    rate, else the reference count at the named size, scaled with the rate (a smaller size's lists span about the
    reference size's time, not longer)."""
    if cfg.requests is not None:
        return cfg.requests, f"{cfg.requests}, set by --requests"
    if capacity is not None and cfg.rate_rps is None:
        rate, _ = arrival_rate(cfg, capacity)
        count = max(MIN_REQUESTS, math.ceil(rate * REFERENCE_SPAN_S) + 1)
        return count, f"{count}: its rate {rate:g} req/s for the reference list's {REFERENCE_SPAN_S:g} s"
    if cfg.rate_rps is not None:
        return REFERENCE_REQUESTS, f"{REFERENCE_REQUESTS}, the reference size (the rate is set by --rate-rps)"
    return default_size(REFERENCE_REQUESTS, cfg.size, floor=MIN_REQUESTS)


def pair_concurrency(cfg: Config, capacity: Capacity | None = None) -> int:
    """B: --concurrency, else the requests in flight at a measured capacity (at most --seqs-high, so a static
    batch fits the base server), else the CPU reference's."""
    if cfg.concurrency is not None:
        return cfg.concurrency
    if capacity is not None:
        return max(1, min(cfg.seqs_high, round(capacity.in_flight)))
    if REFERENCE_CONCURRENCY > cfg.seqs_high:
        raise InvalidInput(f"--concurrency {REFERENCE_CONCURRENCY} (the default) exceeds --seqs-high {cfg.seqs_high}: "
                           "a static batch would not fit the base server", hint="set --concurrency too")
    return REFERENCE_CONCURRENCY
