"""SIGTERM and SIGHUP stop a command the way Ctrl-C does; a second signal ends every server at once.

``timeout``, CI cancellation, ``docker stop``, systemd and Kubernetes send SIGTERM, a closed
terminal SIGHUP. The first such signal calls the handler of SIGINT, so whatever handles Ctrl-C at that
moment (the client's event loop cancelling in-flight requests, a bench writing and signing the
arms it measured as an aborted run) handles it too, and the command exits 130 as after Ctrl-C.
A second SIGTERM or SIGHUP does not wait for that cleanup: every server still running is ended
(``harness.runtime.reaper``) and the process exits at once with 128 + the signal number.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from harness.runtime import reaper

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """The handler of SIGTERM and SIGHUP for one command (``install`` in the main thread)."""

    def __init__(self, command: str):
        self.command = command
        self.received: list[int] = []
        self.previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        """Handle SIGTERM and SIGHUP (only the main thread can; elsewhere this does nothing)."""
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self.handle) for sig in FORWARDED}
            if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # inherited (a background job): Ctrl-C's path is
                self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)  # the stop
        return self

    def uninstall(self) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        self.previous = {}

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        name = signal.Signals(signum).name
        if len(self.received) == 1:
            print(f"infkit {self.command}: {name}: stopping as after Ctrl-C (send it again to stop at once)",
                  file=sys.stderr, flush=True)
            on_ctrl_c = signal.getsignal(signal.SIGINT)
            if callable(on_ctrl_c):  # Python's (KeyboardInterrupt) or the event loop's (cancel the main task)
                on_ctrl_c(signal.SIGINT, frame)
            return  # ignored just now (the client's loop closing): that run ends anyway, a second signal still acts
        ended = reaper.kill_all()
        print(f"infkit {self.command}: second stop signal ({name}): ended {ended} server(s), exiting now",
              file=sys.stderr, flush=True)
        os._exit(128 + signum)
