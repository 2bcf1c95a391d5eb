"""One daemon thread that calls a function every ``interval_s`` until stopped: the loop every sampler runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Periodic:
    """Call ``tick`` at the start (with ``first``) and every ``interval_s`` after it, in a daemon thread."""

    tick: Callable[[], None]
    interval_s: float
    name: str
    first: bool = True
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        if self.first:
            self.tick()
        while not self._stop.wait(self.interval_s):
            self.tick()

    def start(self) -> Periodic:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop and wait up to ``timeout_s``; True when the thread has ended (a hung call leaves it running)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()
