"""Every server this process started, and the last-resort stop of all of them.

A first SIGINT, SIGTERM or SIGHUP unwinds normally: each server is stopped by the session that
started it, and the run is written and signed as aborted. A second signal may cut that short;
``kill_all`` then ends what is still tracked at once (a local process group by SIGKILL, a
container by a short stop) before the process exits. A local server also has a watchdog
(``harness.runtime.local``) that stops its process group when this process dies in any way,
SIGKILL included, so no path leaves an engine running.
"""

from __future__ import annotations

import threading

from harness.runtime.base import ServerHandle

KILL_STOP_TIMEOUT_S = 2.0  # a handle without kill(): stop it with this short grace

_lock = threading.Lock()
_live: dict[int, ServerHandle] = {}


def track(handle: ServerHandle) -> ServerHandle:
    """Remember ``handle`` until ``untrack``; returns it."""
    with _lock:
        _live[id(handle)] = handle
    return handle


def untrack(handle: ServerHandle) -> None:
    with _lock:
        _live.pop(id(handle), None)


def tracked() -> list[ServerHandle]:
    """The live handles, the latest started first."""
    with _lock:
        return list(reversed(_live.values()))


def kill_all() -> int:
    """End every tracked server now (latest first); the number ended. Never raises."""
    handles = tracked()
    for handle in handles:
        try:
            kill = getattr(handle, "kill", None)
            if callable(kill):
                kill()
            else:
                handle.stop(KILL_STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a last resort must try every server, whatever one of them raises
            pass
        untrack(handle)
    return len(handles)
