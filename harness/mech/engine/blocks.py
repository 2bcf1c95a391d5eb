"""KV block pools the batching simulator allocates from.

Every pool counts in blocks of ``block_size`` tokens and answers the same calls:

- ``peek_prefix(req)``: (cached tokens, blocks a hit would take off the free list), no side effects;
- ``acquire_prefix(rid, req)``: take references on the cached prefix, count the query and hit;
- ``allocate(n)``: take n blocks for computation (evicting cached blocks if needed), or False;
- ``commit_prompt(rid, req)``: the prompt is computed: publish its full blocks for reuse;
- ``release(rid, held_blocks)``: the request finished or was preempted: drop its references.

``PlainPool`` never caches. ``HashedBlockPool`` is vLLM's prefix cache: a full
block is identified by a hash chained over its parent's hash and its tokens,
blocks carry reference counts, and blocks whose count drops to zero join an
LRU free queue while keeping their hash, so they can still be hit until they
are evicted. Hits are whole blocks and never cover the last prompt token.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from harness.mech.engine.workload import SimRequest, prompt_token_ids


@dataclass
class PoolCounters:
    capacity_blocks: int
    query_tokens: int = 0
    hit_tokens: int = 0
    references: int = 0
    evictions: int = 0
    reclaimed_blocks: int = 0
    peak_used_blocks: int = 0

    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "hit_rate": round(self.hit_rate(), 6)}


class _Pool:
    num_free: int

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.counters = PoolCounters(num_blocks)

    def _track_peak(self) -> None:
        used = self.counters.capacity_blocks - self.num_free
        if used > self.counters.peak_used_blocks:
            self.counters.peak_used_blocks = used


class PlainPool(_Pool):
    """A counter of free blocks: no prefix caching."""

    name = "none"
    caches = False

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.num_free = num_blocks

    def peek_prefix(self, req: SimRequest) -> tuple[int, int]:
        return 0, 0

    def acquire_prefix(self, rid: int, req: SimRequest) -> int:
        self.counters.query_tokens += req.input_tokens
        return 0

    def allocate(self, n: int) -> bool:
        if n > self.num_free:
            return False
        self.num_free -= n
        self._track_peak()
        return True

    def commit_prompt(self, rid: int, req: SimRequest) -> None:
        return None

    def release(self, rid: int, held_blocks: int) -> None:
        self.num_free += held_blocks
        self.counters.reclaimed_blocks += held_blocks


@lru_cache(maxsize=8192)
def block_hashes(req: SimRequest, block_size: int, max_blocks: int) -> tuple[int, ...]:
    """Chained hashes of the first ``max_blocks`` full blocks of the prompt (pure, so memoised)."""
    ids = prompt_token_ids(req, max_blocks * block_size)
    hashes, parent = [], 0
    for b in range(max_blocks):
        parent = hash((parent, tuple(ids[b * block_size:(b + 1) * block_size])))
        hashes.append(parent)
    return tuple(hashes)


class HashedBlockPool(_Pool):
    """vLLM-style prefix cache: hash-chained full blocks, reference counts, LRU free queue."""

    name = "hashed"
    caches = True

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.free_plain = num_blocks
        self.ref: dict[int, int] = {}  # block hash -> reference count
        self.lru: OrderedDict[int, None] = OrderedDict()  # cached blocks with no reference, oldest first
        self.held: dict[int, list[int]] = {}  # request -> hashes it references

    @property  # type: ignore[override]
    def num_free(self) -> int:
        return self.free_plain + len(self.lru)

    def _hit_hashes(self, req: SimRequest) -> list[int]:
        hits = []
        for h in block_hashes(req, self.block_size, (req.input_tokens - 1) // self.block_size):
            if h not in self.ref:
                break
            hits.append(h)
        return hits

    def peek_prefix(self, req: SimRequest) -> tuple[int, int]:
        hits = self._hit_hashes(req)
        return len(hits) * self.block_size, sum(1 for h in hits if self.ref[h] == 0)

    def acquire_prefix(self, rid: int, req: SimRequest) -> int:
        hits = self._hit_hashes(req)
        for h in hits:
            if self.ref[h] == 0:
                del self.lru[h]
            self.ref[h] += 1
        self.held[rid] = list(hits)
        self.counters.query_tokens += req.input_tokens
        self.counters.hit_tokens += len(hits) * self.block_size
        self.counters.references += len(hits)
        self._track_peak()
        return len(hits) * self.block_size

    def allocate(self, n: int) -> bool:
        if n > self.num_free:
            return False
        take_plain = min(n, self.free_plain)
        self.free_plain -= take_plain
        for _ in range(n - take_plain):
            victim, _ = self.lru.popitem(last=False)
            del self.ref[victim]
            self.counters.evictions += 1
        self._track_peak()
        return True

    def commit_prompt(self, rid: int, req: SimRequest) -> None:
        held = self.held.setdefault(rid, [])
        for h in block_hashes(req, self.block_size, req.input_tokens // self.block_size)[len(held):]:
            if h in self.ref:  # an identical block is already cached: ours stays private
                continue
            self.ref[h] = 1
            held.append(h)

    def release(self, rid: int, held_blocks: int) -> None:
        hashes = self.held.pop(rid, [])
        # the tail of a sequence is evicted first: append its blocks to the LRU queue in reverse
        for h in reversed(hashes):
            self.ref[h] -= 1
            if self.ref[h] == 0:
                self.lru[h] = None
        self.free_plain += held_blocks - len(hashes)
        self.counters.reclaimed_blocks += held_blocks
