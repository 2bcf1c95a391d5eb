"""Deterministic continuous-batching engine (vLLM v1 scheduling), simulated step by step.

Each step has one token budget (``max_num_batched_tokens``): running requests
first (one token per decoding request, a prefill chunk for a request still
prefilling), then waiting requests in policy order while budget, sequence
slots and KV blocks last. When blocks run out, running requests are preempted
from the policy's victim end and later recomputed (prompt + generated tokens
prefilled again). A request's first token comes out of the step that
completes its prefill.

Over stretches where nothing but decoding happens (no prefill, no admission
possible, no arrival, no finish, no block shortage) the engine advances K steps
at once with the cost model's closed form (with a prefix cache, only while
nobody waits, since evictions could change who is admissible). Block demand over K steps is exact:
a decoding request needs a block at every step where its KV length is a
multiple of ``block_size``, and since all decoding requests advance together,
their (KV length - step counter) mod block_size is fixed; the engine keeps a
count per residue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from harness.errors import InvalidInput
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.queues import make_queue
from harness.mech.engine.types import EngineConfig, EngineRun, Event, Seq, SimRequestRecord


class Engine:
    def __init__(self, cfg: EngineConfig, cost: StepCostModel, pool, arrivals: list[Seq],
                 on_finish: Callable[[Seq, float], list[Seq]] | None = None, log_steps: bool = False):
        self.cfg, self.cost, self.pool = cfg, cost, pool
        self.bs = cfg.block_size
        self.pending = [(s.arrival_s, s.req.index, s) for s in arrivals]
        heapq.heapify(self.pending)
        self.on_finish = on_finish
        self.waiting = make_queue(cfg.policy)
        self.running: list[Seq] = []
        self.now_s, self.g = 0.0, 0
        self.heap: list[tuple[int, int, Seq]] = []  # (finish step, admission order, seq)
        self.phase = [0] * self.bs
        self.n_decode = self.sum_kv_base = 0
        self.order = 0
        self.records: list[SimRequestRecord] = []
        self.events: list[Event] = []
        self.steps = self.jumps = self.preemptions = 0
        self.busy_s = self.batch_seconds = 0.0
        # (start_s, end_s, cost features summed over the step or jump), for calibration
        self.step_log: list[tuple[float, float, tuple[float, ...]]] | None = [] if log_steps else None

    # -- bookkeeping ---------------------------------------------------------------------------
    def event(self, seq: Seq, kind: str, t_s: float | None = None) -> None:
        if self.cfg.trace:
            self.events.append(Event(round(self.now_s if t_s is None else t_s, 9), seq.req.index, kind))

    def enter_decode(self, seq: Seq) -> None:
        kv = seq.computed  # after a (re)prefill the KV holds exactly the prompt being computed
        seq.kv_base, seq.gen_base, seq.decoding = kv - self.g, seq.generated - self.g, True
        self.phase[seq.kv_base % self.bs] += 1
        self.n_decode += 1
        self.sum_kv_base += seq.kv_base
        heapq.heappush(self.heap, (seq.target - seq.gen_base, seq.order, seq))

    def leave_decode(self, seq: Seq) -> None:
        seq.generated, seq.computed = seq.gen_base + self.g, seq.kv_base + self.g
        seq.decoding = False
        self.phase[seq.kv_base % self.bs] -= 1
        self.n_decode -= 1
        self.sum_kv_base -= seq.kv_base  # its heap entry goes stale; advance() skips stale entries

    def kv_len(self, seq: Seq) -> int:
        return seq.kv_base + self.g if seq.decoding else seq.computed

    def finish(self, seq: Seq, reason: str) -> None:
        if seq.decoding:
            self.leave_decode(seq)
        if seq in self.running:
            self.running.remove(seq)
            self.pool.release(seq.req.index, math.ceil(self.kv_len(seq) / self.bs))
        self.event(seq, "finish_" + reason)
        self.records.append(seq.record(self.now_s, reason))
        if self.on_finish:
            for nxt in self.on_finish(seq, self.now_s):
                heapq.heappush(self.pending, (nxt.arrival_s, nxt.req.index, nxt))

    # -- one step ------------------------------------------------------------------------------
    def preempt(self, seq: Seq) -> None:
        if seq.decoding:
            self.leave_decode(seq)
        self.running.remove(seq)
        self.pool.release(seq.req.index, math.ceil(seq.computed / self.bs))
        self.preemptions += 1
        seq.preemptions += 1
        # recompute: the prompt and every generated token are prefilled again here, even if the KV came from
        # a prefill instance
        seq.prompt_len, seq.computed, seq.prefilled = seq.req.input_tokens + seq.generated, 0, False
        self.event(seq, "preempt")
        if not self.running:
            self.finish(seq, "error")  # it cannot fit even alone
        else:
            self.waiting.push_front(seq)

    def admit_one(self, budget: int) -> tuple[Seq, int] | None:
        seq = self.waiting.head()
        if len(self.running) >= self.cfg.max_num_seqs:
            return None
        if seq.prefilled:
            need, chunk, cached, revived = math.ceil(seq.prompt_len / self.bs), 0, seq.prompt_len, 0
        else:
            cached, revived = self.pool.peek_prefix(seq.req) if seq.computed == 0 else (0, 0)
            chunk = min(seq.prompt_len - cached, budget)
            if not self.cfg.chunked_prefill and chunk < seq.prompt_len - cached:
                return None
            need = math.ceil((cached + chunk) / self.bs) - cached // self.bs
        if self.pool.num_free - revived < need:
            if not self.running:
                self.waiting.pop()
                self.finish(seq, "error")  # larger than the whole KV pool
            return None
        self.waiting.pop()
        if not seq.prefilled:
            seq.cached += self.pool.acquire_prefix(seq.req.index, seq.req)
            seq.computed = cached
        self.pool.allocate(need)
        self.order += 1
        seq.order = self.order
        seq.admitted_s = self.now_s if seq.admitted_s is None else seq.admitted_s
        self.running.append(seq)
        self.event(seq, "schedule")
        if seq.prefilled:
            seq.computed = seq.prompt_len
            if seq.generated >= seq.target:
                self.finish(seq, seq.reason())
            else:
                self.enter_decode(seq)
        return seq, chunk

    def step(self) -> None:
        budget, chunks = self.cfg.max_num_batched_tokens - self.n_decode, []
        demand = self.phase[-self.g % self.bs]
        for seq in self.running:
            if not seq.decoding:
                chunk = min(seq.prompt_len - seq.computed, budget)
                if chunk and (self.cfg.chunked_prefill or chunk == seq.prompt_len - seq.computed):
                    chunks.append((seq, chunk))
                    budget -= chunk
                    demand += math.ceil((seq.computed + chunk) / self.bs) - math.ceil(seq.computed / self.bs)
        preempted = False
        while self.pool.num_free < demand and self.running:
            victim = self.waiting.victim(self.running)
            v_chunk = next((c for s, c in chunks if s is victim), None)
            if victim.decoding:
                demand -= 1 if self.kv_len(victim) % self.bs == 0 else 0
            elif v_chunk is not None:
                demand -= math.ceil((victim.computed + v_chunk) / self.bs) - math.ceil(victim.computed / self.bs)
                chunks = [(s, c) for s, c in chunks if s is not victim]
                budget += v_chunk
            self.preempt(victim)
            preempted = True
        decode_seqs, decode_ctx = self.n_decode, self.sum_kv_base + self.g * self.n_decode + self.n_decode
        self.pool.allocate(demand)
        while not preempted and budget > 0 and len(self.waiting):
            admitted = self.admit_one(budget)
            if admitted is None:
                break
            if admitted[1]:
                chunks.append(admitted)
                budget -= admitted[1]
        if not chunks and not decode_seqs:
            return
        prefill_tokens = sum(c for _, c in chunks)
        pairs = sum(c * (s.computed + c / 2) for s, c in chunks)
        dt_s = self.cost.step_ms(prefill_tokens, pairs, decode_seqs, decode_ctx) / 1000
        self.advance(dt_s, decode_seqs + len(chunks), 1,
                     (1.0, prefill_tokens, pairs / 1000, decode_seqs, decode_ctx / 1000))
        for seq, chunk in chunks:
            seq.computed += chunk
            if seq.computed == seq.prompt_len:
                self.pool.commit_prompt(seq.req.index, seq.req)
                seq.generated += 1
                if seq.first_token_s is None:
                    seq.first_token_s = self.now_s
                    self.event(seq, "first_token")
                if seq.generated >= seq.target:
                    self.finish(seq, seq.reason())
                else:
                    self.enter_decode(seq)

    def advance(self, dt_s: float, batch: int, steps: int, features: tuple[float, ...]) -> None:
        if self.step_log is not None:
            self.step_log.append((self.now_s, self.now_s + dt_s, features))
        self.now_s += dt_s
        self.g += steps
        self.busy_s += dt_s
        self.batch_seconds += batch * dt_s
        self.steps += steps
        while self.heap and self.heap[0][0] <= self.g:
            _, _, seq = heapq.heappop(self.heap)
            if seq.decoding and seq.target - seq.gen_base <= self.g:
                self.finish(seq, seq.reason())

    # -- analytic decode stretches -------------------------------------------------------------
    def blocks_needed(self, k: int) -> int:
        """Blocks the decoding requests allocate over the next k steps."""
        bs = self.bs
        total = self.n_decode * (k // bs)
        rest = k % bs
        if rest:
            # within the first `rest` steps, a request needs a block when its KV length hits a multiple of
            # bs: the residues (kv_base mod bs) of a cyclic window of `rest` ending at -g mod bs
            start = (-self.g - rest + 1) % bs
            end = start + rest
            total += sum(self.phase[start:end]) if end <= bs else sum(self.phase[start:]) + sum(self.phase[:end - bs])
        return total

    def can_admit(self) -> bool:
        if not len(self.waiting) or len(self.running) >= self.cfg.max_num_seqs:
            return False
        seq = self.waiting.head()
        cached, revived = (self.pool.peek_prefix(seq.req) if seq.computed == 0 and not seq.prefilled else (0, 0))
        first = seq.prompt_len if seq.prefilled else min(seq.prompt_len - cached,
                                                          self.cfg.max_num_batched_tokens - self.n_decode)
        return self.pool.num_free - revived >= math.ceil((cached + first) / self.bs) - cached // self.bs

    def try_jump(self) -> bool:
        if not self.cfg.analytic or self.n_decode != len(self.running) or self.can_admit():
            return False
        if self.pool.caches and len(self.waiting):
            return False  # decode allocations may evict cached blocks and change who can be admitted next
        k = self.heap[0][0] - self.g if self.heap else 1
        seqs, ctx = self.n_decode, self.sum_kv_base + self.g * self.n_decode + self.n_decode
        limits = []
        if self.pending:
            limits.append(self.pending[0][0])
        if self.cfg.queue_timeout_s is not None and len(self.waiting):
            limits.append(self.waiting.oldest_arrival_s() + self.cfg.queue_timeout_s)
        for t in limits:
            k = min(k, self.cost.steps_to_reach((t - self.now_s) * 1000, seqs, ctx))
        if self.blocks_needed(k) > self.pool.num_free:
            lo, hi = 0, k  # largest k with enough blocks
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self.blocks_needed(mid) <= self.pool.num_free else (lo, mid - 1)
            k = lo
        if k < 2:
            return False
        self.pool.allocate(self.blocks_needed(k))
        self.jumps += 1
        self.advance(self.cost.decode_run_ms(k, seqs, ctx) / 1000, seqs, k,
                     (k, 0.0, 0.0, k * seqs, (k * ctx + seqs * k * (k - 1) / 2) / 1000))
        return True

    # -- main loop -----------------------------------------------------------------------------
    def admit_arrivals(self) -> None:
        while self.pending and self.pending[0][0] <= self.now_s:
            seq = heapq.heappop(self.pending)[2]
            self.event(seq, "arrive", seq.arrival_s)
            self.waiting.push(seq)
        if self.cfg.queue_timeout_s is not None:
            deadline = self.now_s - self.cfg.queue_timeout_s
            for seq in self.waiting.remove_where(lambda s: s.arrival_s < deadline and s.admitted_s is None):
                self.finish(seq, "timeout")

    def run(self) -> EngineRun:
        while True:
            self.admit_arrivals()
            if not self.running and not len(self.waiting):
                if not self.pending:
                    break
                self.now_s = max(self.now_s, self.pending[0][0])
                continue
            if self.cfg.policy == "lpm":
                self.waiting.reorder(lambda s: self.pool.peek_prefix(s.req)[0])
            if not self.try_jump():
                self.step()
        return EngineRun(sorted(self.records, key=lambda r: r.index), tuple(self.events), self.steps, self.jumps,
                         self.preemptions, self.now_s, self.busy_s, self.batch_seconds)


def validate(cfg: EngineConfig, longest_prompt: int) -> None:
    if not cfg.chunked_prefill and longest_prompt > cfg.max_num_batched_tokens:
        raise InvalidInput(f"a {longest_prompt}-token prompt exceeds max_num_batched_tokens="
                           f"{cfg.max_num_batched_tokens} without chunked prefill")
