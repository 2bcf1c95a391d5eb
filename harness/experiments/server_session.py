"""One server start of a bench: launch, health wait with progress, cache reset, guaranteed stop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import Backend, BackendConfig, lookup
from harness.backends.cache_reset import CacheReset
from harness.progress import Progress
from harness.runtime.base import Runtime, ServerHandle


@dataclass
class ServerSession:
    """A healthy server plus what the run records about it."""

    name: str
    backend: Backend
    handle: ServerHandle
    config: BackendConfig
    command: list[str]
    env: dict[str, str]
    startup_s: float
    settings: dict[str, Any] = field(default_factory=dict)  # what this server variant sets beyond the bench's base
    exit_status: int | None = None
    resets: list[CacheReset] = field(default_factory=list)
    effective: dict[str, Any] | None = None  # the engine's effective settings, read back after the start

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def metrics_url(self) -> str:
        return self.handle.base_url + "/metrics"

    def read_effective(self, keys: Iterable[str] = ()) -> dict[str, Any] | None:
        """Read the engine's effective settings (its backend's ``effective_keys`` and ``keys``) into ``effective``."""
        doc = self.backend.effective_config(self.handle.base_url)
        if doc is not None:
            self.effective = {k: lookup(doc, k) for k in dict.fromkeys([*self.backend.effective_keys, *keys])}
        return self.effective

    def reset_prefix_cache(self) -> CacheReset:
        outcome = self.backend.reset_prefix_cache(self.handle.base_url)
        self.resets.append(outcome)
        return outcome

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend.name, "version": self.backend.version(),
                "command": self.command, "env": self.env, "pid": self.handle.pid, "settings": self.settings,
                "startup_s": round(self.startup_s, 1), "log": self.handle.log_path.name,
                "prefix_caching": self.config.prefix_caching, "exit_status": self.exit_status,
                "image": self.handle.image, "effective": self.effective,
                "effective_source": f"GET {self.backend.effective_path}" if self.backend.effective_path else None,
                "prefix_cache_resets": {"requested": sum(r.requested for r in self.resets),
                                        "confirmed": sum(r.confirmed is True for r in self.resets),
                                        "last": self.resets[-1].to_dict() if self.resets else None}}


@contextmanager
def server_session(name: str, backend: Backend, runtime: Runtime, config: BackendConfig, log_dir: Path, *,
                   start_timeout_s: float, progress: Progress = print, settings: dict[str, Any] | None = None,
                   on_start: Callable[[ServerSession], None] | None = None,
                   on_stop: Callable[[ServerSession], None] | None = None) -> Iterator[ServerSession]:
    """Start ``backend`` under ``runtime``, wait for health, yield, and always stop the whole server.

    ``on_start`` sees the session as soon as the process exists (its pid is worth recording before the
    health wait); ``on_stop`` sees it stopped, with its exit status.
    """
    spec = backend.server_spec(config)
    progress(f"server {name}: starting {backend.name} {backend.version()} on port {spec.port} "
             f"(about a minute on 2 cores; a new engine configuration compiles for longer)")
    started = time.monotonic()
    handle = runtime.start(spec, log_dir, log_name=f"server-{name}.log")
    session = ServerSession(name=name, backend=backend, handle=handle, config=config, command=list(spec.argv),
                            env=dict(spec.env), startup_s=0.0, settings=dict(settings or {}))
    try:
        if on_start:
            on_start(session)
        handle.wait_healthy(start_timeout_s, progress=progress)
        session.startup_s = time.monotonic() - started
        progress(f"server {name}: healthy after {session.startup_s:.0f} s")
        yield session
    finally:
        session.exit_status = handle.stop()
        progress(f"server {name}: stopped")
        if on_stop:
            on_stop(session)
