"""One server start of a bench: launch, health wait with progress, cache reset, guaranteed stop."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import Backend, BackendConfig
from harness.backends.cache_reset import CacheReset
from harness.runtime.base import Runtime, ServerHandle

Progress = Callable[[str], None]


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
    exit_status: int | None = None
    resets: list[CacheReset] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def metrics_url(self) -> str:
        return self.handle.base_url + "/metrics"

    def reset_prefix_cache(self) -> CacheReset:
        outcome = self.backend.reset_prefix_cache(self.handle.base_url)
        self.resets.append(outcome)
        return outcome

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend.name, "version": self.backend.version(),
                "command": self.command, "env": self.env, "pid": self.handle.pid,
                "startup_s": round(self.startup_s, 1), "log": self.handle.log_path.name,
                "prefix_caching": self.config.prefix_caching, "exit_status": self.exit_status,
                "image": self.handle.image,
                "prefix_cache_resets": {"requested": sum(r.requested for r in self.resets),
                                        "confirmed": sum(r.confirmed is True for r in self.resets),
                                        "last": self.resets[-1].to_dict() if self.resets else None}}


@contextmanager
def server_session(name: str, backend: Backend, runtime: Runtime, config: BackendConfig, log_dir: Path, *,
                   start_timeout_s: float, progress: Progress = print,
                   on_start: Callable[[ServerSession], None] | None = None) -> Iterator[ServerSession]:
    """Start ``backend`` under ``runtime``, wait for health, yield, and always stop the whole server."""
    spec = backend.server_spec(config)
    progress(f"server {name}: starting {backend.name} {backend.version()} on port {spec.port} "
             f"(about a minute on 2 cores; the first start ever compiles for longer)")
    started = time.monotonic()
    handle = runtime.start(spec, log_dir, log_name=f"server-{name}.log")
    session = ServerSession(name=name, backend=backend, handle=handle, config=config, command=list(spec.argv),
                            env=dict(spec.env), startup_s=0.0)
    try:
        if on_start:
            on_start(session)
        # The local runtime reports progress while it waits; other runtimes may not take it.
        if "progress" in inspect.signature(handle.wait_healthy).parameters:
            handle.wait_healthy(start_timeout_s, progress=progress)  # type: ignore[call-arg]
        else:
            handle.wait_healthy(start_timeout_s)
        session.startup_s = time.monotonic() - started
        progress(f"server {name}: healthy after {session.startup_s:.0f} s")
        yield session
    finally:
        session.exit_status = handle.stop()
        progress(f"server {name}: stopped")
