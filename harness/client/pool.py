"""Run a workload with one or several client processes sharing one clock.

One asyncio process tops out at a few thousand streamed chunks per second; past that
the client, not the server, sets the latency. With ``workers > 1`` the requests are
dealt round-robin to worker processes (spawned, so no thread state is inherited), each
with its own event loop and connection pool and its share of the concurrency; they all
start on the same ``t0`` of CLOCK_MONOTONIC and append to the same ``requests.jsonl``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, replace

from harness.client.loop import run_async
from harness.client.openai import ClientConfig
from harness.client.runner import Share, ShareStats, run_share
from harness.client.sessions import group_sessions
from harness.errors import InvalidInput
from harness.workload.model import Request

START_MARGIN_S = 0.05  # between the last worker reporting ready and t0
READY_TIMEOUT_S = 60.0
STREAMS_PER_WORKER = 1024  # auto mode: one process per this many streams (~10-15 us of CPU per token each)


@dataclass(frozen=True)
class ClientRun:
    t0: float  # CLOCK_MONOTONIC seconds of the run start
    stats: tuple[ShareStats, ...]
    interrupted: bool
    workers: int


def auto_workers(concurrency: int) -> int:
    return max(1, min(os.cpu_count() or 1, -(-concurrency // STREAMS_PER_WORKER)))


def _split(total: int | None, parts: int, part: int) -> int | None:
    if total is None:
        return None
    return total // parts + (1 if part < total % parts else 0)


def plan_shares(requests: tuple[Request, ...], client: ClientConfig, records_path: str, *, workers: int,
                closed_concurrency: int | None, max_concurrency: int | None, batch_barrier: bool = False,
                endpoints: tuple[str, ...] = (), sessions: str | None = None) -> list[Share]:
    """Deal requests round-robin and split the concurrency; never more workers than slots.

    Static batches (``batch_barrier``) run in one process: the barrier spans the whole batch.
    With several ``endpoints`` (replicas) there is a whole number of workers per endpoint and
    worker ``w`` sends to endpoint ``w mod E``, so request ``i`` goes to endpoint ``i mod E``
    (E: at most one endpoint per request). Every endpoint gets at least one concurrency slot.
    """
    spread = max(1, min(len(endpoints), len(requests)))
    if batch_barrier and spread > 1:
        raise InvalidInput("static batches (batch barrier) run against one endpoint, not several replicas")
    if spread > 1:
        closed_concurrency = max(closed_concurrency, spread) if closed_concurrency else None
        max_concurrency = max(max_concurrency, spread) if max_concurrency else None
        limit = closed_concurrency or max_concurrency
        workers = spread * max(1, min(workers, len(requests), limit or workers) // spread)
    else:
        limit = closed_concurrency or max_concurrency
        workers = 1 if batch_barrier else max(1, min(workers, len(requests), limit or workers))
    dealt = [requests[w::workers] for w in range(workers)]
    if sessions:
        groups = group_sessions(requests)
        dealt = [tuple(r for g in groups[w::workers] for r in g) for w in range(workers)]
    return [
        Share(worker=w, requests=dealt[w], sessions=sessions,
              client=replace(client, endpoint=endpoints[w % spread]) if spread > 1 else client,
              records_path=records_path, closed_concurrency=_split(closed_concurrency, workers, w),
              max_concurrency=_split(max_concurrency, workers, w), batch_barrier=batch_barrier)
        for w in range(workers)
    ]


def _worker_main(share: Share, conn) -> None:
    """Entry of a worker process: warm up, report ready, wait for t0, run, send stats back."""

    def start_clock() -> float:
        conn.send("ready")
        return conn.recv()

    try:
        stats = run_async(run_share(share, start_clock))
    except KeyboardInterrupt:
        stats = ShareStats(share.worker, None, 0, None, None, interrupted=True)
    try:
        conn.send(stats)
    except (BrokenPipeError, OSError):
        pass


def run_client(shares: list[Share]) -> ClientRun:
    """Run the shares (in this process when there is one); Ctrl-C ends the run with what finished."""
    if len(shares) == 1:
        try:
            stats = run_async(run_share(shares[0]))
        except KeyboardInterrupt:
            stats = ShareStats(0, None, 0, None, None, interrupted=True)
        return ClientRun(t0=stats.t0 or time.monotonic(), stats=(stats,), interrupted=stats.interrupted, workers=1)
    ctx = mp.get_context("spawn")
    procs, conns = [], []
    for share in shares:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(share, child), name=f"infkit-client-{share.worker}", daemon=True)
        proc.start()
        procs.append(proc)
        conns.append(parent)
    interrupted = False
    stats: list[ShareStats] = []
    t0 = time.monotonic()
    try:
        for conn, proc in zip(conns, procs, strict=False):
            if not conn.poll(READY_TIMEOUT_S):
                raise InvalidInput(f"client worker {proc.name} did not start within {READY_TIMEOUT_S:g} s")
            conn.recv()
        t0 = time.monotonic() + START_MARGIN_S
        for conn in conns:
            conn.send(t0)
        for conn in conns:
            stats.append(conn.recv())
    except KeyboardInterrupt:
        interrupted = True
        for proc in procs:
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signal.SIGINT)
        for conn in conns:
            if conn.poll(30.0):
                try:
                    stats.append(conn.recv())
                except EOFError:
                    pass
    except EOFError:
        pass  # a worker died; its finished records are on disk, the rest become not_sent
    finally:
        for proc in procs:
            proc.join(timeout=30.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
    interrupted = interrupted or any(s.interrupted for s in stats)
    return ClientRun(t0=t0, stats=tuple(stats), interrupted=interrupted, workers=len(shares))
