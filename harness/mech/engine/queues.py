"""Waiting-queue policies of the batching simulator, by name.

- ``fcfs``: arrival order; a preempted request goes back to the front (vLLM).
- ``priority``: lowest ``priority`` value first, then arrival; preemption evicts
  the running request with the worst (priority, arrival) key (vLLM's priority policy).
- ``lpm``: longest cached prefix first, ties by arrival (SGLang's lpm); the
  order is recomputed at each scheduling point from the prefix cache.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from harness.errors import InvalidInput

POLICIES = ("fcfs", "priority", "lpm")


def _key(seq: Any) -> tuple[int, float, int]:
    return (seq.req.priority, seq.arrival_s, seq.req.index)


class FcfsQueue:
    def __init__(self) -> None:
        self.items: deque[Any] = deque()

    def __len__(self) -> int:
        return len(self.items)

    def push(self, seq: Any) -> None:
        self.items.append(seq)

    def push_front(self, seq: Any) -> None:
        self.items.appendleft(seq)

    def head(self) -> Any:
        return self.items[0]

    def pop(self) -> Any:
        return self.items.popleft()

    def reorder(self, cached_tokens: Callable[[Any], int]) -> None:
        return None

    def remove_where(self, predicate: Callable[[Any], bool]) -> list[Any]:
        gone = [s for s in self.items if predicate(s)]
        if gone:
            self.items = deque(s for s in self.items if not predicate(s))
        return gone

    def oldest_arrival_s(self) -> float | None:
        return min((s.arrival_s for s in self.items), default=None)

    @staticmethod
    def victim(running: list[Any]) -> Any:
        return running[-1]


class PriorityQueue(FcfsQueue):
    def __init__(self) -> None:
        self.heap: list[tuple[tuple[int, float, int], Any]] = []

    def __len__(self) -> int:
        return len(self.heap)

    @property  # type: ignore[override]
    def items(self) -> list[Any]:
        return [s for _, s in self.heap]

    def push(self, seq: Any) -> None:
        heapq.heappush(self.heap, (_key(seq), seq))

    push_front = push

    def head(self) -> Any:
        return self.heap[0][1]

    def pop(self) -> Any:
        return heapq.heappop(self.heap)[1]

    def remove_where(self, predicate: Callable[[Any], bool]) -> list[Any]:
        gone = [s for _, s in self.heap if predicate(s)]
        if gone:
            self.heap = [(k, s) for k, s in self.heap if not predicate(s)]
            heapq.heapify(self.heap)
        return gone

    @staticmethod
    def victim(running: list[Any]) -> Any:
        return max(running, key=_key)


class LpmQueue(FcfsQueue):
    def reorder(self, cached_tokens: Callable[[Any], int]) -> None:
        self.items = deque(sorted(self.items, key=lambda s: (-cached_tokens(s), s.arrival_s, s.req.index)))


def make_queue(policy: str) -> FcfsQueue:
    factories = {"fcfs": FcfsQueue, "priority": PriorityQueue, "lpm": LpmQueue}
    try:
        return factories[policy]()
    except KeyError:
        raise InvalidInput(f"unknown scheduling policy {policy!r}", hint="one of " + ", ".join(POLICIES)) from None
