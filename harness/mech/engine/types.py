"""Configuration, per-request state and outputs of the batching engine."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InvalidInput
from harness.mech.engine.queues import POLICIES
from harness.mech.engine.workload import SimRequest


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler settings, named as in vLLM where vLLM has the setting."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 65536
    chunked_prefill: bool = True
    policy: str = "fcfs"
    queue_timeout_s: float | None = None
    analytic: bool = True
    trace: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks"):
            if getattr(self, name) < 1:
                raise InvalidInput(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidInput(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                               f"max_num_seqs ({self.max_num_seqs}) so every running request can decode")
        if self.policy not in POLICIES:
            raise InvalidInput(f"unknown scheduling policy {self.policy!r}", hint="one of " + ", ".join(POLICIES))
        if self.queue_timeout_s is not None and self.queue_timeout_s <= 0:
            raise InvalidInput(f"queue_timeout_s must be positive, got {self.queue_timeout_s}")


@dataclass(frozen=True)
class Event:
    """One lifecycle event: arrive, schedule, first_token, preempt, finish_<reason>."""

    t_s: float
    index: int
    kind: str


@dataclass(frozen=True)
class SimRequestRecord:
    """One simulated request's engine-side times, in simulated seconds.

    TTFT here runs from **arrival** (the request enters the engine's waiting queue) to the
    step that emits its first token: the server's view, queueing included, with no client
    or network in between. ``harness.client.records.RequestRecord`` is the measured
    client's record, whose TTFT runs from **sent** (just before the HTTP request is
    written) to the first streamed chunk. Calibration compares the two (with a fitted
    client/HTTP overhead), so they are kept as two named types, never one.
    """

    index: int
    arrival_s: float
    admitted_s: float | None
    first_token_s: float | None
    finish_s: float
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    preemptions: int
    reason: str

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.output_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def queue_wait_s(self) -> float | None:
        return None if self.admitted_s is None else self.admitted_s - self.arrival_s


@dataclass(frozen=True)
class EngineRun:
    records: list[SimRequestRecord]
    events: tuple[Event, ...]
    steps: int
    jumps: int
    preemptions: int
    end_s: float
    busy_s: float
    batch_seconds: float


class Seq:
    """Mutable per-request engine state (the engine owns it; nothing else mutates it)."""

    __slots__ = ("req", "arrival_s", "prompt_len", "computed", "generated", "target", "cached", "preemptions",
                 "admitted_s", "first_token_s", "order", "decoding", "kv_base", "gen_base", "prefilled")

    def __init__(self, req: SimRequest, arrival_s: float, prefilled: bool = False, first_token_s: float | None = None):
        self.req, self.arrival_s, self.prefilled = req, arrival_s, prefilled
        self.prompt_len, self.computed = req.input_tokens, 0
        self.generated = 1 if prefilled else 0
        self.target = req.target_tokens
        self.cached = self.preemptions = self.order = self.kv_base = self.gen_base = 0
        self.admitted_s: float | None = None
        self.first_token_s = first_token_s
        self.decoding = False

    def reason(self) -> str:
        return "length" if self.target >= self.req.output_tokens else "stop"

    def record(self, now_s: float, reason: str) -> SimRequestRecord:
        return SimRequestRecord(self.req.index, self.arrival_s, self.admitted_s, self.first_token_s, now_s,
                             self.req.input_tokens, self.generated, self.cached, self.preemptions, reason)
