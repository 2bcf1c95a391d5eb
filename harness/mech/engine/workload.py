"""Requests for the simulators: read from infkit workload files or generated in-process.

Workload files are read with ``harness.workload.load_workload`` (schema-checked, id
re-hashed), the same reader the serving client uses; the simulator keeps each request's
``index, offset_s, input_tokens, output_tokens``, ``priority`` (0 when absent) and, for prefix
workloads, ``group`` and ``prefix_tokens``. Simulated prompt token
ids are derived deterministically: prefix token i of group g is mix(g, i),
every other token is mix of the request index and position, so requests of one
group share exactly their first ``prefix_tokens`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import InvalidInput
from harness.ids import sha256_canonical
from harness.workload import Workload, load_workload

_MASK64 = (1 << 64) - 1
_BLOCK_SPACE = 1 << 62  # trace block ids live apart from prefix groups and request indices


@dataclass(frozen=True)
class SimRequest:
    index: int
    arrival_s: float | None
    input_tokens: int
    output_tokens: int
    group: int | None = None
    prefix_tokens: int = 0
    priority: int = 0
    stop_after: int | None = None
    blocks: tuple[int, ...] = ()  # a trace's block ids: the prompt's leading blocks of ``block_tokens`` each
    block_tokens: int = 0

    @property
    def target_tokens(self) -> int:
        """Tokens actually generated: stops early at ``stop_after`` (an EOS), else at the length limit."""
        return min(self.output_tokens, self.stop_after) if self.stop_after else self.output_tokens


@dataclass(frozen=True)
class SimWorkload:
    requests: tuple[SimRequest, ...]
    workload_id: str
    kind: str
    arrival: dict[str, Any]
    seeds: dict[str, int] = field(default_factory=dict)
    concurrency: int | None = None


def _mix(a: int, b: int) -> int:
    """splitmix64 of the pair: a stable 64-bit token id."""
    z = (a * 0x9E3779B97F4A7C15 + b + 0x632BE59BD9B4E019) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


@lru_cache(maxsize=8192)
def prompt_token_ids(req: SimRequest, length: int | None = None) -> tuple[int, ...]:
    """The first ``length`` (default: all) prompt token ids of ``req`` (pure, so memoised)."""
    n = req.input_tokens if length is None else length
    if req.blocks:  # block j's token i is the same in every request holding block id blocks[j]
        covered = min(n, len(req.blocks) * req.block_tokens)
        ids = [_mix(_BLOCK_SPACE + req.blocks[i // req.block_tokens], i % req.block_tokens) for i in range(covered)]
        return tuple(ids + [_mix(-(2 + req.index) & _MASK64, i) for i in range(covered, n)])
    shared = min(req.prefix_tokens, n) if req.group is not None else 0
    ids = [_mix(1 + req.group, i) for i in range(shared)] if shared else []
    ids += [_mix(-(2 + req.index) & _MASK64, i) for i in range(shared, n)]
    return tuple(ids)


def from_workload(workload: Workload) -> SimWorkload:
    """The simulator's view of a serving workload: lengths, offsets and prefix groups, no text."""
    block = (workload.header.get("sharing") or {}).get("block_tokens", 0)
    reqs = tuple(SimRequest(index=r.index, arrival_s=r.offset_s, input_tokens=r.input_tokens,
                            output_tokens=r.output_tokens, group=r.group, prefix_tokens=r.prefix_tokens or 0,
                            priority=r.priority or 0, blocks=tuple(r.hash_ids or ()) if block else (),
                            block_tokens=block if r.hash_ids else 0)
                 for r in workload.requests)
    bad = [r.index for r in reqs if r.prefix_tokens > r.input_tokens]
    if bad:
        raise InvalidInput(f"workload {workload.workload_id}: request {bad[0]} has prefix_tokens > input_tokens")
    arrival = dict(workload.arrival)
    return SimWorkload(reqs, workload.workload_id, workload.kind, arrival, dict(workload.header.get("seeds") or {}),
                       arrival.get("concurrency"))


def read_workload(path: str | Path) -> SimWorkload:
    """Read an infkit workload file (``harness.workload.load_workload``) for the simulators."""
    if not Path(path).is_file():
        raise InvalidInput(f"cannot read workload {path}: no such file")
    return from_workload(load_workload(path))


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of an in-process workload: Poisson arrivals, uniform lengths around their means."""

    requests: int = 1000
    rate_rps: float = 10.0
    input_mean: int = 512
    output_mean: int = 128
    spread: float = 0.5
    groups: int = 0
    prefix_tokens: int = 0
    seed: int = 0
    kind: str = "random"

    def __post_init__(self) -> None:
        if self.requests < 1 or self.rate_rps <= 0 or self.input_mean < 1 or self.output_mean < 1:
            raise InvalidInput("synthetic workload needs requests >= 1, rate_rps > 0 and token means >= 1")
        if not 0 <= self.spread < 1:
            raise InvalidInput(f"spread must be in [0, 1), got {self.spread}")
        if self.groups < 0 or self.prefix_tokens < 0 or (self.groups and self.prefix_tokens >= self.input_mean):
            raise InvalidInput("prefix_tokens must be >= 0 and below input_mean; groups >= 0")


def _lengths(rng: np.random.Generator, mean: int, spread: float, n: int) -> np.ndarray:
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.integers(lo, hi + 1, size=n)


def synthetic(spec: SyntheticSpec) -> SimWorkload:
    """Generate requests from ``spec``; one seeded generator per random dimension."""
    seeds = {"arrival": spec.seed, "lengths": spec.seed + 1, "groups": spec.seed + 2}
    gaps = np.random.default_rng(seeds["arrival"]).exponential(1 / spec.rate_rps, size=spec.requests)
    offsets = np.cumsum(gaps) - gaps[0]
    length_rng = np.random.default_rng(seeds["lengths"])
    suffix_mean = spec.input_mean - spec.prefix_tokens if spec.groups else spec.input_mean
    inputs = _lengths(length_rng, suffix_mean, spec.spread, spec.requests)
    outputs = _lengths(length_rng, spec.output_mean, spec.spread, spec.requests)
    groups = np.random.default_rng(seeds["groups"]).integers(0, max(spec.groups, 1), size=spec.requests)
    reqs = []
    for i in range(spec.requests):
        prefix = spec.prefix_tokens if spec.groups else 0
        reqs.append(SimRequest(i, round(float(offsets[i]), 6), int(inputs[i]) + prefix, int(outputs[i]),
                               int(groups[i]) if spec.groups else None, prefix))
    arrival = {"process": "poisson", "rate_rps": spec.rate_rps}
    return SimWorkload(tuple(reqs), sha256_canonical({"synthetic": spec.__dict__}), spec.kind, arrival, seeds)


def paired_prefix_workloads(spec: SyntheticSpec) -> tuple[SimWorkload, SimWorkload]:
    """The shared-prefix workload and its unique-prefix twin: same lengths and arrivals, no sharing."""
    shared = synthetic(SyntheticSpec(**{**spec.__dict__, "kind": "shared-prefix"}))
    unique_reqs = tuple(SimRequest(r.index, r.arrival_s, r.input_tokens, r.output_tokens, None, 0)
                        for r in shared.requests)
    unique = SimWorkload(unique_reqs, sha256_canonical({"synthetic": spec.__dict__, "twin": "unique-prefix"}),
                         "unique-prefix", shared.arrival, shared.seeds)
    return shared, unique
