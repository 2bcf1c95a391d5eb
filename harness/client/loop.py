"""The event loop the client runs on: uvloop where installed (as vLLM's and SGLang's servers do), else asyncio's."""

from __future__ import annotations

import asyncio
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
    """``asyncio.run`` on the fastest available loop; Ctrl-C cancels the main task either way."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
