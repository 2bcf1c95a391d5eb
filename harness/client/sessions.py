"""Drive session workloads: each session's turns in order, each resending the conversation with the real replies.

A session starts at its offset (timed schedule) or when one of the concurrency slots frees (closed loop, one
slot per session). Turn t+1 waits for turn t to end and then for its think time; its messages are the user
turns so far and the replies the server gave (``history="real"``), or that history with each message's words
shuffled (``"fresh"``: the twin, no prefix in common with what was sent before). A turn that does not complete
stops its session: the turns after it are recorded ``not_sent`` with the reason.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from harness.client.http import ConnectionPool
from harness.client.openai import ClientConfig, send_request
from harness.client.records import RecordWriter, RequestRecord
from harness.ids import sha256_canonical
from harness.workload.model import Request

HISTORIES = ("real", "fresh")
Guard = Callable[[Coroutine[Any, Any, RequestRecord], RecordWriter], Coroutine[Any, Any, RequestRecord]]


def group_sessions(requests: tuple[Request, ...] | list[Request]) -> list[list[Request]]:
    """Requests by session in order of their first request, each session's turns in turn order."""
    out: dict[int, list[Request]] = {}
    for req in requests:
        out.setdefault(req.conversation if req.conversation is not None else -1 - req.index, []).append(req)
    return [sorted(turns, key=lambda r: r.turn or 0) for turns in out.values()]


def messages_digest(messages: tuple[dict[str, str], ...] | list[dict[str, str]]) -> str:
    """sha256 of the messages as sent (canonical JSON): a record names the exact conversation its turn carried."""
    return sha256_canonical([dict(m) for m in messages])


def _fresh(message: dict[str, str], seed: str) -> dict[str, str]:
    words = message["content"].split(" ")
    random.Random(seed).shuffle(words)
    return {**message, "content": " ".join(words)}


def history_to_send(history: list[dict[str, str]], mode: str, session: int, turn: int) -> list[dict[str, str]]:
    if mode == "real":
        return history
    return [_fresh(m, f"{session}:{turn}:{i}") for i, m in enumerate(history)]


def _stopped(req: Request, failed: RequestRecord, worker: int) -> RequestRecord:
    return RequestRecord(index=req.index, status="not_sent", input_tokens=req.input_tokens,
                         output_tokens_requested=req.output_tokens, worker=worker,
                         error=f"turn {failed.extra.get('turn')} of session {req.conversation} ended "
                               f"{failed.status}; the session stopped there",
                         extra={"session": req.conversation, "turn": req.turn})


async def run_session(turns: list[Request], pool: ConnectionPool, client: ClientConfig, writer: RecordWriter,
                      guard: Guard, t0: float, *, mode: str, worker: int, ready_s: float) -> int:
    """Send one session's turns in order; returns the records written."""
    history: list[dict[str, str]] = []
    for k, req in enumerate(turns):
        if k and req.think_s:
            await asyncio.sleep(req.think_s)
            ready_s = time.monotonic() - t0
        session, turn = req.conversation or 0, req.turn or 0
        messages = (*history_to_send(history, mode, session, turn), *(req.messages or ()))
        rec = await guard(send_request(pool, client, replace(req, messages=tuple(messages)), t0, scheduled_s=ready_s,
                                       worker=worker, extra={"messages_sha256": messages_digest(messages)}), writer)
        if not rec.completed:
            for rest in turns[k + 1:]:
                writer.write(_stopped(rest, rec, worker))
            return len(turns)
        history += [*(req.messages or ()), {"role": "assistant", "content": rec.output_text or ""}]
        ready_s = time.monotonic() - t0
    return len(turns)


async def drive_sessions(requests: tuple[Request, ...], pool: ConnectionPool, client: ClientConfig,
                         writer: RecordWriter, guard: Guard, t0: float, *, mode: str, worker: int,
                         slots: int | None, timed: bool) -> int:
    """Every session of ``requests``: started at its offset (``timed``) or as a slot frees, at most ``slots``
    at once."""
    sem = asyncio.Semaphore(slots) if slots else None
    client = replace(client, keep_text=True)  # the replies are the next turn's history

    async def one(turns: list[Request]) -> int:
        if timed:
            delay = t0 + (turns[0].offset_s or 0.0) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if sem is None:
            return await run_session(turns, pool, client, writer, guard, t0, mode=mode, worker=worker,
                                     ready_s=turns[0].offset_s or 0.0)
        async with sem:
            ready = turns[0].offset_s if timed else time.monotonic() - t0
            return await run_session(turns, pool, client, writer, guard, t0, mode=mode, worker=worker,
                                     ready_s=ready or 0.0)

    tasks = [asyncio.ensure_future(one(s)) for s in group_sessions(requests)]
    try:
        return sum(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
