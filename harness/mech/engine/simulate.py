"""Serving modes over the engine: continuous, static, and prefill/decode disaggregation.

- continuous: one ``Engine`` (vLLM v1 scheduling).
- static: the server takes whatever is waiting (up to ``max_num_seqs``) when it
  is idle, prefills the batch padded to its longest prompt, and decodes the
  padded batch until its longest request is done; nothing joins mid-batch.
- disaggregated: a prefill engine produces each first token; the KV then moves
  to a decode engine over a link of ``kv_bandwidth_gbps`` with ``kv_latency_ms``.
  With ``overlap`` the transfer streams layer by layer during the prefill, so
  only the part longer than the request's prefill time is exposed; without it
  the whole transfer is exposed. The client sees the first token once the
  decode side holds the KV (TTFT includes the exposed hand-off).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InvalidInput
from harness.mech.engine.blocks import HashedBlockPool, PlainPool
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.engine import Engine, validate
from harness.mech.engine.radix import RadixPool
from harness.mech.engine.types import EngineConfig, EngineRun, Seq, SimRequestRecord
from harness.mech.engine.workload import SimRequest, SimWorkload

POOLS = {"none": PlainPool, "hashed": HashedBlockPool, "radix": RadixPool}
MODES = ("continuous", "static", "disaggregated")


@dataclass(frozen=True)
class HandOff:
    kv_bytes_per_token: int
    kv_bandwidth_gbps: float = 100.0
    kv_latency_ms: float = 0.5
    overlap: bool = True

    def __post_init__(self) -> None:
        if self.kv_bandwidth_gbps <= 0 or self.kv_latency_ms < 0 or self.kv_bytes_per_token <= 0:
            raise InvalidInput("hand-off needs kv_bandwidth_gbps > 0, kv_latency_ms >= 0, kv bytes/token > 0")

    def transfer_s(self, tokens: int) -> float:
        return self.kv_latency_ms / 1000 + tokens * self.kv_bytes_per_token * 8 / (self.kv_bandwidth_gbps * 1e9)


def make_pool(kind: str, num_blocks: int, block_size: int):
    try:
        return POOLS[kind](num_blocks, block_size)
    except KeyError:
        raise InvalidInput(f"unknown prefix cache {kind!r}", hint="one of " + ", ".join(POOLS)) from None


def _arrivals(workload: SimWorkload) -> tuple[list[Seq], object]:
    """Open-loop requests arrive at their offsets; closed-loop ones when a predecessor finishes."""
    reqs = list(workload.requests)
    if all(r.arrival_s is not None for r in reqs):
        return [Seq(r, float(r.arrival_s)) for r in reqs], None
    if not workload.concurrency:
        raise InvalidInput("a closed-loop workload (offset_s null) needs arrival.concurrency in its header")
    backlog = reqs[workload.concurrency:][::-1]

    def next_one(_: Seq, now_s: float) -> list[Seq]:
        return [Seq(backlog.pop(), now_s)] if backlog else []

    return [Seq(r, 0.0) for r in reqs[: workload.concurrency]], next_one


def run_continuous(workload: SimWorkload, cfg: EngineConfig, cost: StepCostModel, prefix_cache: str = "none"):
    validate(cfg, max(r.input_tokens for r in workload.requests))
    seqs, on_finish = _arrivals(workload)
    pool = make_pool(prefix_cache, cfg.num_blocks, cfg.block_size)
    return Engine(cfg, cost, pool, seqs, on_finish).run(), pool


def run_static(workload: SimWorkload, cfg: EngineConfig, cost: StepCostModel) -> EngineRun:
    if any(r.arrival_s is None for r in workload.requests):
        raise InvalidInput("static batching is simulated for open-loop workloads (every offset_s set)")
    queue = sorted(workload.requests, key=lambda r: (r.arrival_s, r.index))
    records: list[SimRequestRecord] = []
    now = busy = batch_seconds = 0.0
    steps, i = 0, 0
    while i < len(queue):
        now = max(now, queue[i].arrival_s or 0.0)
        batch: list[SimRequest] = []
        while i < len(queue) and (queue[i].arrival_s or 0.0) <= now and len(batch) < cfg.max_num_seqs:
            batch.append(queue[i])
            i += 1
        b, longest_in = len(batch), max(r.input_tokens for r in batch)
        prefill_s = cost.step_ms(b * longest_in, b * longest_in * longest_in / 2, 0, 0) / 1000
        start, first = now, now + prefill_s
        decode_steps = max(r.target_tokens for r in batch) - 1
        ctx0 = b * (longest_in + 1)
        for r in batch:
            done = first + cost.decode_run_ms(r.target_tokens - 1, b, ctx0) / 1000
            reason = "length" if r.target_tokens >= r.output_tokens else "stop"
            records.append(SimRequestRecord(r.index, r.arrival_s or 0.0, start, first, done, r.input_tokens,
                                         r.target_tokens, 0, 0, reason))
        now = first + cost.decode_run_ms(decode_steps, b, ctx0) / 1000
        busy += now - start
        batch_seconds += b * (now - start)
        steps += 1 + decode_steps
    return EngineRun(sorted(records, key=lambda r: r.index), (), steps, 0, 0, now, busy, batch_seconds)


def run_disaggregated(workload: SimWorkload, cfg: EngineConfig, cost: StepCostModel, handoff: HandOff,
                      prefix_cache: str = "none") -> tuple[EngineRun, dict[str, float]]:
    if any(r.arrival_s is None for r in workload.requests):
        raise InvalidInput("disaggregation is simulated for open-loop workloads (every offset_s set)")
    validate(cfg, max(r.input_tokens for r in workload.requests))
    prefill_seqs = []
    for r in workload.requests:
        seq = Seq(r, float(r.arrival_s or 0.0))
        seq.target = 1
        prefill_seqs.append(seq)
    p_pool = make_pool(prefix_cache, cfg.num_blocks, cfg.block_size)
    p_run = Engine(cfg, cost, p_pool, prefill_seqs).run()
    by_index = {r.index: r for r in workload.requests}
    decode_seqs, exposed_total, transfer_total = [], 0.0, 0.0
    for rec in p_run.records:
        req = by_index[rec.index]
        transfer = handoff.transfer_s(req.input_tokens)
        prefill_s = rec.first_token_s - (rec.admitted_s or rec.arrival_s)
        exposed = max(0.0, transfer - prefill_s) if handoff.overlap else transfer
        exposed_total += exposed
        transfer_total += transfer
        ready = rec.first_token_s + exposed
        decode_seqs.append(Seq(req, ready, prefilled=True, first_token_s=ready))
    d_run = Engine(cfg, cost, make_pool("none", cfg.num_blocks, cfg.block_size), decode_seqs).run()
    p_by = {r.index: r for r in p_run.records}
    records = [SimRequestRecord(r.index, p_by[r.index].arrival_s, p_by[r.index].admitted_s, r.first_token_s,
                             r.finish_s, r.input_tokens, r.output_tokens, p_by[r.index].cached_tokens,
                             r.preemptions + p_by[r.index].preemptions, r.reason) for r in d_run.records]
    merged = EngineRun(records, (), p_run.steps + d_run.steps, p_run.jumps + d_run.jumps,
                       p_run.preemptions + d_run.preemptions, max(p_run.end_s, d_run.end_s),
                       p_run.busy_s + d_run.busy_s, p_run.batch_seconds + d_run.batch_seconds)
    n = len(records)
    handoff_stats = {"transfer_ms_mean": 1000 * transfer_total / n, "exposed_ms_mean": 1000 * exposed_total / n,
                     "overlapped_ms_mean": 1000 * (transfer_total - exposed_total) / n,
                     "prefill_busy_s": p_run.busy_s, "decode_busy_s": d_run.busy_s}
    return merged, handoff_stats
