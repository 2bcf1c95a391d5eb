"""Drive one share of a workload in one asyncio process: closed loop or timed schedule.

One keep-alive connection pool per process, opened before the clock starts; a loop-lag monitor measures how
late the event loop wakes (the client's own bottleneck, reported for validity) and keeps each excursion, a wake-up
later than ``STALL_RECORD_MS``, with its start and end on the run clock, so that validity can exclude just the
requests whose figures a stall could move (``harness.serving.stalls``).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.client.http import ConnectionPool
from harness.client.openai import ClientConfig, send_request
from harness.client.records import RecordWriter, RequestRecord
from harness.client.sessions import drive_sessions
from harness.workload.model import Request

LAG_PROBE_INTERVAL_S = 0.005
STALL_RECORD_MS = 10.0  # a wake-up later than this is kept as an excursion (the loop-lag floor is 20 ms)
MAX_STALLS = 1024  # excursions kept per process; past it they are counted, and validity falls back to the run rule
GC_GEN0_THRESHOLD = 50_000


@dataclass(frozen=True)
class Share:
    """The requests one process sends, and how."""

    worker: int
    requests: tuple[Request, ...]
    client: ClientConfig
    records_path: str
    closed_concurrency: int | None = None  # closed loop with this many slots; else follow offset_s
    max_concurrency: int | None = None  # cap on in-flight requests of a timed schedule
    batch_barrier: bool = False  # closed loop as static batches: send closed_concurrency, wait for all, repeat
    sessions: str | None = None  # a session workload: "real" or "fresh" history (harness.client.sessions)


@dataclass(frozen=True)
class ShareStats:
    worker: int
    t0: float | None
    records_written: int
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    interrupted: bool = False
    lag_samples: int = 0
    warm_connections: int = 0
    # (start_s, end_s) on the run clock of each loop excursion past STALL_RECORD_MS, adjacent ones merged; None: not
    # kept (a process that never ran); stalls_dropped counts those past MAX_STALLS
    stalls: tuple[tuple[float, float], ...] | None = None
    stalls_dropped: int = 0


class _LagMonitor:
    """Sleeps a fixed interval and records how late each wake-up is, and when the late ones were late: from the
    moment the wake-up was due to the moment it ran, on the run clock (seconds since ``t0``)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.lags_s: list[float] = []
        self.stalls: list[tuple[float, float]] = []
        self.dropped = 0

    def note(self, due: float, woke: float) -> None:
        """Keep ``[due, woke]`` as an excursion when it is late past STALL_RECORD_MS, merged into the last one when
        it begins within a probe interval of that one's end (one stall seen by consecutive probes)."""
        if (woke - due) * 1e3 <= STALL_RECORD_MS:
            return
        start, end = due - self.t0, woke - self.t0
        if self.stalls and start <= self.stalls[-1][1] + LAG_PROBE_INTERVAL_S:
            self.stalls[-1] = (self.stalls[-1][0], end)
        elif len(self.stalls) < MAX_STALLS:
            self.stalls.append((start, end))
        else:
            self.dropped += 1

    async def run(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            woke = time.monotonic()
            self.lags_s.append(max(0.0, woke - start - LAG_PROBE_INTERVAL_S))
            self.note(start + LAG_PROBE_INTERVAL_S, woke)


async def _guarded(coro, writer: RecordWriter) -> RequestRecord:
    """Await a send and write its record however it ends (a cancelled one too)."""
    try:
        rec = await coro
    except asyncio.CancelledError as exc:
        rec = getattr(exc, "record", None)
        if rec is not None:
            writer.write(rec)
        raise
    writer.write(rec)
    return rec


async def _closed(share: Share, pool: ConnectionPool, writer: RecordWriter, t0: float) -> int:
    queue = collections.deque(share.requests)
    written = 0

    async def slot() -> None:
        nonlocal written
        ready_s = max(0.0, time.monotonic() - t0)
        while queue:
            req = queue.popleft()
            await _guarded(send_request(pool, share.client, req, t0, scheduled_s=ready_s, worker=share.worker), writer)
            written += 1
            ready_s = time.monotonic() - t0

    await _all([asyncio.ensure_future(slot()) for _ in range(min(share.closed_concurrency or 1, len(queue)) or 1)])
    return written


async def _batches(share: Share, pool: ConnectionPool, writer: RecordWriter, t0: float) -> int:
    """Static batching driven by the client: send a batch of ``closed_concurrency``, wait for all, send the next.

    A request's ``scheduled_s`` is when its slot freed (the end of the request it replaces in the
    previous batch) and its ``slot_s`` when the batch was released, so its client queue wait
    (sent - scheduled) is the time it waited for the rest of that batch, and its send lag
    (sent - slot) stays the client's own lateness.
    """
    size = share.closed_concurrency or 1
    requests = list(share.requests)
    freed = [max(0.0, time.monotonic() - t0)] * size
    for start in range(0, len(requests), size):
        batch = requests[start:start + size]
        release_s = time.monotonic() - t0
        records = await _all([asyncio.ensure_future(_guarded(send_request(
            pool, share.client, req, t0, scheduled_s=freed[j], slot_s=release_s if start else None,
            worker=share.worker), writer)) for j, req in enumerate(batch)])
        for j, rec in enumerate(records):
            freed[j] = rec.end_s if rec.end_s is not None else time.monotonic() - t0
    return len(requests)


async def _timed(share: Share, pool: ConnectionPool, writer: RecordWriter, t0: float) -> int:
    sem = asyncio.Semaphore(share.max_concurrency) if share.max_concurrency else None
    tasks: list[asyncio.Future] = []

    async def one(req: Request) -> None:
        slot_s = None
        if sem is not None:
            waited = sem.locked()
            await sem.acquire()
            slot_s = time.monotonic() - t0 if waited else None
        try:
            await _guarded(send_request(pool, share.client, req, t0, scheduled_s=req.offset_s or 0.0,
                                        slot_s=slot_s, worker=share.worker), writer)
        finally:
            if sem is not None:
                sem.release()

    try:
        for req in share.requests:
            delay = t0 + (req.offset_s or 0.0) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(req)))
        await _all(tasks)
    except asyncio.CancelledError:
        await _cancel(tasks)
        raise
    return len(tasks)


async def _sessions(share: Share, pool: ConnectionPool, writer: RecordWriter, t0: float) -> int:
    return await drive_sessions(share.requests, pool, share.client, writer, _guarded, t0, mode=share.sessions or "real",
                                worker=share.worker, slots=share.closed_concurrency or share.max_concurrency,
                                timed=share.closed_concurrency is None)


async def _all(tasks: list[asyncio.Future]) -> list:
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        await _cancel(tasks)
        raise


async def _cancel(tasks: list[asyncio.Future]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_share(share: Share, start_clock: Callable[[], float] = time.monotonic) -> ShareStats:
    """Warm the connection pool, take the run clock ``t0 = start_clock()``, send the share's requests.

    Every ended request is written. Worker processes pass a ``start_clock`` that reports
    ready and blocks until the parent hands out the common ``t0``.
    """
    pool = share.closed_concurrency or share.max_concurrency or max(1, len(share.requests))
    monitor: _LagMonitor | None = None
    interrupted = False
    written = 0
    with RecordWriter(share.records_path) as writer:
        conns = ConnectionPool(share.client.endpoint)
        try:
            # Without warm connections the first wave of a high-concurrency run pays TCP setup in its TTFT.
            warmed = await conns.warm(min(pool, len(share.requests)))
            thresholds = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(GC_GEN0_THRESHOLD, 50, 100)
            t0 = start_clock()
            delay = t0 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            monitor = _LagMonitor(t0)
            lag_task = asyncio.ensure_future(monitor.run())
            try:
                runner = (_sessions if share.sessions else _batches if share.batch_barrier else
                          _closed if share.closed_concurrency else _timed)
                written = await runner(share, conns, writer, t0)
            except asyncio.CancelledError:
                interrupted = True
            finally:
                lag_task.cancel()
                await asyncio.gather(lag_task, return_exceptions=True)
                gc.set_threshold(*thresholds)  # the caller's process gets its GC back as it was
                gc.unfreeze()
        finally:
            conns.close()
    lags_ms = np.asarray(monitor.lags_s if monitor else ()) * 1e3
    return ShareStats(
        worker=share.worker, t0=t0, records_written=written, interrupted=interrupted, lag_samples=int(lags_ms.size),
        warm_connections=warmed, stalls=tuple(monitor.stalls) if monitor else None,
        stalls_dropped=monitor.dropped if monitor else 0,
        loop_lag_p99_ms=float(np.percentile(lags_ms, 99)) if lags_ms.size else None,
        loop_lag_max_ms=float(lags_ms.max()) if lags_ms.size else None,
    )
