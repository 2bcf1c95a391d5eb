"""Prefix caches at block size 4: exact states of the hashed-block pool and the radix tree, then the paired run."""

from __future__ import annotations

import pytest

from harness.errors import InvalidInput
from harness.mech.engine.blocks import HashedBlockPool, PlainPool, block_hashes
from harness.mech.engine.radix import Node, RadixPool
from harness.mech.engine.workload import SimRequest, prompt_token_ids
from harness.mech.kvcache import KvCacheConfig, run

A = SimRequest(0, 0.0, 10, 4, group=0, prefix_tokens=8)
B = SimRequest(1, 0.0, 10, 4, group=0, prefix_tokens=8)
D = SimRequest(3, 0.0, 10, 4, group=0, prefix_tokens=4)  # shares only the first page with A
EXACT = SimRequest(4, 0.0, 8, 4, group=0, prefix_tokens=8)  # prompt is exactly two cached blocks


def test_token_ids_share_exactly_the_prefix() -> None:
    a, b, d = prompt_token_ids(A), prompt_token_ids(B), prompt_token_ids(D)
    assert a[:8] == b[:8] and a[8:] != b[8:]
    assert a[:4] == d[:4] and a[4:8] != d[4:8]
    assert len(set(a)) == 10


def test_hashed_pool_refcounts_lru_and_eviction() -> None:
    pool = HashedBlockPool(num_blocks=8, block_size=4)
    assert pool.peek_prefix(A) == (0, 0)
    assert pool.acquire_prefix(0, A) == 0
    assert pool.allocate(3)
    pool.commit_prompt(0, A)
    h0, h1 = block_hashes(A, 4, 2)
    assert pool.ref == {h0: 1, h1: 1} and pool.num_free == 5
    # B hits both full prefix blocks; they are referenced, not taken off the free list
    assert pool.peek_prefix(B) == (8, 0)
    assert pool.acquire_prefix(1, B) == 8
    assert pool.ref == {h0: 2, h1: 2}
    assert pool.allocate(1)  # B's last 2 tokens
    pool.commit_prompt(1, B)
    pool.release(0, 3)
    assert pool.ref == {h0: 1, h1: 1} and pool.num_free == 5
    pool.release(1, 3)
    # blocks with no reference keep their hash in the LRU queue, tail block first
    assert list(pool.lru) == [h1, h0] and pool.num_free == 8
    # a 1-block hit revives a cached block: it leaves the free list
    assert pool.peek_prefix(D) == (4, 1)
    # taking 7 blocks evicts the least recently freed cached block (A/B's tail prefix block) only
    assert pool.allocate(7)
    assert pool.counters.evictions == 1 and list(pool.lru) == [h0]
    assert pool.peek_prefix(B) == (4, 1)
    assert pool.counters.hit_tokens == 8 and pool.counters.query_tokens == 20
    assert pool.counters.hit_rate() == pytest.approx(0.4)


def test_hits_never_cover_the_last_prompt_token() -> None:
    pool = HashedBlockPool(num_blocks=8, block_size=4)
    pool.acquire_prefix(0, A)
    pool.allocate(3)
    pool.commit_prompt(0, A)
    assert pool.peek_prefix(EXACT) == (4, 0)  # 8-token prompt: at most (8 - 1) // 4 = 1 block
    radix = RadixPool(num_blocks=8, block_size=4)
    radix.acquire_prefix(0, A)
    radix.allocate(3)
    radix.commit_prompt(0, A)
    assert radix.peek_prefix(EXACT)[0] == 4


def shape(node: Node) -> list:
    """(pages, lock_ref, children) of a tree, children in a stable order."""
    return [(len(c.key), c.lock_ref, shape(c)) for c in sorted(node.children.values(), key=lambda n: n.order)]


def test_radix_tree_split_locks_and_lru_leaf_eviction() -> None:
    pool = RadixPool(num_blocks=8, block_size=4)
    pool.acquire_prefix(0, A)
    pool.allocate(3)
    pool.commit_prompt(0, A)
    assert shape(pool.root) == [(2, 1, [])] and pool.evictable == 0
    assert pool.acquire_prefix(1, B) == 8
    assert shape(pool.root) == [(2, 2, [])]
    pool.allocate(1)
    pool.commit_prompt(1, B)
    # D shares one page: matching splits A's 2-page edge; D's second page becomes a sibling leaf
    assert pool.acquire_prefix(3, D) == 4
    pool.allocate(2)
    pool.commit_prompt(3, D)
    assert shape(pool.root) == [(1, 3, [(1, 2, []), (1, 1, [])])]
    pool.release(0, 3)
    pool.release(1, 3)
    assert shape(pool.root) == [(1, 1, [(1, 0, []), (1, 1, [])])]
    assert pool.evictable == 1 and pool.num_free == pool.free_plain + 1
    pool.release(3, 3)
    assert pool.evictable == 3
    # evict two pages: the A/B leaf (least recently used) first, then D's leaf; the shared page stays
    free_before = pool.free_plain
    assert pool.allocate(free_before + 2)
    assert pool.counters.evictions == 2
    assert shape(pool.root) == [(1, 0, [])]


def test_plain_pool_never_hits() -> None:
    pool = PlainPool(4, 4)
    assert pool.peek_prefix(A) == (0, 0) and pool.acquire_prefix(0, A) == 0
    assert pool.allocate(4) and not pool.allocate(1)
    pool.release(0, 4)
    assert pool.num_free == 4


def test_paired_run_shared_hits_unique_does_not() -> None:
    out = run(KvCacheConfig(requests=120, groups=4, prefix_tokens=512, input_mean=600, rate_rps=4))
    eff = out.details["effects"]
    for manager in ("hashed", "radix"):
        # each group's first request misses; the rest hit the whole-block prefix
        assert 0.6 < eff[manager]["hit_rate_shared"] < 512 / 600 + 0.01
        assert eff[manager]["hit_rate_unique"] == 0
        assert eff[manager]["ttft_p50_ratio_shared_over_unique"] < 0.8
    assert eff["none"]["ttft_p50_ratio_shared_over_unique"] == 1
    assert eff["hashed"]["hit_rate_shared"] == eff["radix"]["hit_rate_shared"]  # no eviction pressure here


def test_invalid_kvcache_configs() -> None:
    with pytest.raises(InvalidInput, match="both"):
        KvCacheConfig(shared_workload="a.jsonl")
    with pytest.raises(InvalidInput, match="--managers: 'lru' is not one of"):
        KvCacheConfig(managers=("lru",))
    with pytest.raises(InvalidInput, match="--managers: needs at least one value"):
        KvCacheConfig(managers=())


def test_radix_peek_counts_pages_revived_from_a_partly_matched_edge() -> None:
    pool = RadixPool(num_blocks=8, block_size=4)
    pool.acquire_prefix(0, A)
    pool.allocate(3)
    pool.commit_prompt(0, A)
    pool.release(0, 3)  # A's 2-page edge is unlocked: both pages evictable
    assert pool.evictable == 2
    cached, revived = pool.peek_prefix(D)  # D matches one page of that edge
    assert (cached, revived) == (4, 1)
    free_before = pool.num_free
    pool.acquire_prefix(3, D)
    assert free_before - pool.num_free == revived
