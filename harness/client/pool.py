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

from harness.client.loop import deferred_interrupt, run_async
from harness.client.openai import ClientConfig
from harness.client.runner import Share, ShareStats, run_share
from harness.client.sessions import group_sessions
from harness.errors import InvalidInput
from harness.workload.model import Request

START_MARGIN_S = 0.05  # between the last worker reporting ready and t0
READY_TIMEOUT_S = 60.0
INTERRUPT_WAIT_S = 10.0  # after Ctrl-C: every worker's records and stats within this, or it is killed
JOIN_TIMEOUT_S = 30.0
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

    try:  # started with Ctrl-C ignored (see _start_workers): from here on it ends the share as in the parent
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stats = run_async(run_share(share, start_clock))
    except KeyboardInterrupt:
        stats = ShareStats(share.worker, None, 0, None, None, interrupted=True)
    try:
        conn.send(stats)
    except (BrokenPipeError, OSError):
        pass


def _start_workers(shares: list[Share]) -> tuple[list, list]:
    """Spawn one process per share with SIGINT ignored, so a Ctrl-C to the terminal's process group cannot
    kill one half-way through its imports (a traceback each); ``_worker_main`` takes Ctrl-C back."""
    ctx = mp.get_context("spawn")
    procs, conns = [], []
    for share in shares:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(share, child), name=f"infkit-client-{share.worker}", daemon=True)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec, unlike a handler
        try:
            proc.start()
        finally:
            signal.signal(signal.SIGINT, previous)
        procs.append(proc)
        conns.append(parent)
    return procs, conns


def _collect_interrupted(procs: list, conns: list, stats: list[ShareStats], started: bool) -> None:
    """Ctrl-C: pass it on to every worker and gather what they send back, all within ``INTERRUPT_WAIT_S``.

    Before the common ``t0`` no worker has sent a request (and one still importing would not see the
    signal): they are killed, and every request becomes ``not_sent``."""
    if not started:
        for proc in procs:
            proc.kill()
        return
    for proc in procs:
        if proc.is_alive() and proc.pid:
            os.kill(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_WAIT_S
    for conn in conns:
        if conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                stats.append(conn.recv())
            except EOFError:
                pass


def run_client(shares: list[Share]) -> ClientRun:
    """Run the shares (in this process when there is one); Ctrl-C ends the run with what finished, in bounded time."""
    if len(shares) == 1:
        try:
            stats = run_async(run_share(shares[0]))
        except KeyboardInterrupt:
            stats = ShareStats(0, None, 0, None, None, interrupted=True)
        return ClientRun(t0=stats.t0 or time.monotonic(), stats=(stats,), interrupted=stats.interrupted, workers=1)
    procs: list = []
    conns: list = []
    interrupted = False
    stats: list[ShareStats] = []
    t0 = time.monotonic()
    started = False
    try:
        procs, conns = _start_workers(shares)
        for conn, proc in zip(conns, procs, strict=False):
            if not conn.poll(READY_TIMEOUT_S):
                raise InvalidInput(f"client worker {proc.name} did not start within {READY_TIMEOUT_S:g} s")
            conn.recv()
        t0 = time.monotonic() + START_MARGIN_S
        for conn in conns:
            conn.send(t0)
        started = True
        for conn in conns:
            stats.append(conn.recv())
    except KeyboardInterrupt:
        interrupted = True
        with deferred_interrupt():
            _collect_interrupted(procs, conns, stats, started)
    except EOFError:
        pass  # a worker died; its finished records are on disk, the rest become not_sent
    finally:
        with deferred_interrupt():
            deadline = time.monotonic() + (INTERRUPT_WAIT_S if interrupted else JOIN_TIMEOUT_S)
            for proc in procs:
                proc.join(timeout=max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    interrupted = interrupted or any(s.interrupted for s in stats)
    return ClientRun(t0=t0, stats=tuple(stats), interrupted=interrupted, workers=len(shares))
