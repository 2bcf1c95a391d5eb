"""SGLang-style radix prefix cache over pages of ``block_size`` tokens.

Edges hold runs of pages (a page key is the tuple of its token ids); a match
splits an edge where it diverges. Requests hold a lock reference on every node
of their matched path, so those pages cannot be evicted; pages in unlocked
nodes are evictable and count as free. Eviction removes least-recently-used
unlocked leaves first, and a parent that becomes an unlocked leaf joins the
candidates. The pool interface is the one in ``harness.mech.engine.blocks``.
"""

from __future__ import annotations

import heapq
import itertools

from harness.mech.engine.blocks import _Pool
from harness.mech.engine.workload import SimRequest, prompt_token_ids

Page = tuple[int, ...]


class Node:
    __slots__ = ("key", "children", "parent", "lock_ref", "last_access", "order")

    def __init__(self, key: tuple[Page, ...], parent: Node | None):
        self.key = key
        self.children: dict[Page, Node] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0
        self.order = 0


class RadixPool(_Pool):
    """Radix-tree prefix cache with lock references and LRU leaf eviction."""

    name = "radix"
    caches = True

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.root = Node((), None)
        self.root.lock_ref = 1
        self.free_plain = num_blocks
        self.evictable = 0  # pages in unlocked nodes
        self.clock = 0
        self.locked: dict[int, Node] = {}  # request -> deepest locked node
        self.owned: dict[int, int] = {}  # request -> pages of its path (held by the tree, not privately)
        self._orders = itertools.count()

    @property  # type: ignore[override]
    def num_free(self) -> int:
        return self.free_plain + self.evictable

    def _pages(self, req: SimRequest, n_pages: int) -> list[Page]:
        ids = prompt_token_ids(req, n_pages * self.block_size)
        return [tuple(ids[i * self.block_size:(i + 1) * self.block_size]) for i in range(n_pages)]

    def _split(self, node: Node, at: int) -> Node:
        """Cut ``node``'s edge after ``at`` pages; return the new upper node."""
        upper = Node(node.key[:at], node.parent)
        upper.lock_ref, upper.last_access, upper.order = node.lock_ref, node.last_access, next(self._orders)
        assert node.parent is not None
        node.parent.children[node.key[0]] = upper
        node.key = node.key[at:]
        node.parent = upper
        upper.children[node.key[0]] = node
        return upper

    def _match(self, pages: list[Page], touch: bool) -> tuple[Node, int, int]:
        """(deepest fully matched node, pages matched, pages matched into an unlocked edge below it)."""
        node, matched = self.root, 0
        while matched < len(pages):
            child = node.children.get(pages[matched])
            if child is None:
                break
            run = 0
            while run < len(child.key) and matched + run < len(pages) and child.key[run] == pages[matched + run]:
                run += 1
            if run < len(child.key):
                if not touch:  # a lookup does not split; report the partly matched edge instead
                    return node, matched + run, run if child.lock_ref == 0 else 0
                child = self._split(child, run)
            if touch:
                self.clock += 1
                child.last_access = self.clock
            node, matched = child, matched + run
        return node, matched, 0

    def _lock(self, node: Node, delta: int) -> None:
        while node is not self.root:
            if node.lock_ref == 0 and delta > 0:
                self.evictable -= len(node.key)
            node.lock_ref += delta
            if node.lock_ref == 0:
                self.evictable += len(node.key)
            node = node.parent  # type: ignore[assignment]

    def peek_prefix(self, req: SimRequest) -> tuple[int, int]:
        pages = self._pages(req, (req.input_tokens - 1) // self.block_size)
        node, matched, revived = self._match(pages, touch=False)
        walk = node
        while walk is not self.root:
            if walk.lock_ref == 0:
                revived += len(walk.key)
            walk = walk.parent  # type: ignore[assignment]
        return matched * self.block_size, revived

    def acquire_prefix(self, rid: int, req: SimRequest) -> int:
        pages = self._pages(req, (req.input_tokens - 1) // self.block_size)
        node, matched, _ = self._match(pages, touch=True)
        self._lock(node, +1)
        self.locked[rid], self.owned[rid] = node, matched
        self.counters.query_tokens += req.input_tokens
        self.counters.hit_tokens += matched * self.block_size
        self.counters.references += matched
        self._track_peak()
        return matched * self.block_size

    def allocate(self, n: int) -> bool:
        if n > self.num_free:
            return False
        if n > self.free_plain:
            self._evict(n - self.free_plain)
        self.free_plain -= n
        self._track_peak()
        return True

    def _evict(self, pages_needed: int) -> None:
        heap = [(n.last_access, n.order, n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < pages_needed and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.evictable -= len(leaf.key)
            self.counters.evictions += len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.order, parent))
        self.free_plain += freed

    def _leaves(self) -> list[Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node is not self.root:
                out.append(node)
        return out

    def commit_prompt(self, rid: int, req: SimRequest) -> None:
        """Insert the computed prompt's full pages; the request's lock moves to the new deepest node."""
        pages = self._pages(req, req.input_tokens // self.block_size)
        node, matched, _ = self._match(pages, touch=True)
        new = tuple(pages[matched:])
        if new:
            leaf = Node(new, node)
            leaf.order = next(self._orders)
            self.clock += 1
            leaf.last_access = self.clock
            node.children[new[0]] = leaf
            self.evictable += len(new)  # unlocked until the lock below moves onto it
            node = leaf
        old = self.locked.get(rid, self.root)
        self._lock(node, +1)
        if old is not self.root:
            self._lock(old, -1)
        # pages the tree already had beyond our hit stay private copies of this request
        self.owned[rid] = self.owned.get(rid, 0) + len(new)
        self.locked[rid] = node

    def release(self, rid: int, held_blocks: int) -> None:
        node = self.locked.pop(rid, self.root)
        if node is not self.root:
            self._lock(node, -1)
        self.free_plain += held_blocks - self.owned.pop(rid, 0)
        self.counters.reclaimed_blocks += held_blocks
