"""The event loop the client runs on: uvloop where installed (as vLLM's and SGLang's servers do), else asyncio's."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest available loop; Ctrl-C cancels the main task either way.

    A second Ctrl-C while the loop shuts down (the run's records are being written) is ignored
    until the loop is closed, so it cannot tear the loop down half-way; the first one still
    ends the run with ``KeyboardInterrupt``.
    """
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    try:
        return runner.run(coro)
    finally:
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            runner.close()
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)


class deferred_interrupt:  # noqa: N801 - used as a context manager, like contextlib's
    """Hold Ctrl-C back while a block that takes bounded time runs (the run's records and result being written).

    In the main thread, SIGINT inside the block only sets ``hit``; the caller decides what an interrupt
    that came then means (``measure`` re-raises it once the result is written). Elsewhere it does nothing.
    """

    def __init__(self) -> None:
        self.hit = False
        self._previous: Any = None

    def _note(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __enter__(self) -> deferred_interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
