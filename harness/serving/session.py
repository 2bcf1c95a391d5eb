"""One server start of a bench: launch, health wait with progress, cache reset, guaranteed stop."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends import comm
from harness.backends.base import Backend, BackendConfig, lookup
from harness.backends.cache_reset import CacheReset
from harness.backends.layouts import Layout, group_spec
from harness.models import PreparedModel
from harness.progress import Progress
from harness.runtime import reaper
from harness.runtime.base import Runtime, ServerHandle, ServerStartError
from harness.runtime.group import GroupHandle, GroupSpec, start_group
from harness.runtime.local import free_port
from harness.runtime.ray_cluster import replicas_report
from harness.serving.energy import kv_cache_info
from harness.telemetry.gpu_sampler import IdleCheck, idle_check
from harness.telemetry.prometheus import parse


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
    group: GroupSpec | None = None  # several processes: vLLM's multi-node launch, replicas, a Ray cluster
    model: PreparedModel | None = None  # the model it serves when not the bench's
    placement: dict[str, Any] | None = None  # where the engine's threads run, the cores left to the client
    gpu_idle: IdleCheck | None = None  # its GPUs read before it started: the memory baseline, processes, clocks
    given: str | None = None  # the endpoint of a server the user runs (``harness.serving.given``): not started here
    engine_version: str | None = None  # the version such a server reports (GET /version), where it says one
    effective_source: str | None = None  # where ``effective`` was read
    verification: dict[str, Any] | None = None  # what was checked of a given server before measuring, and what not

    @property
    def version(self) -> str:
        """The engine release: the backend's for a server started here, the server's own word for a given one."""
        if self.given is not None:
            return self.engine_version or "unknown (the server does not say)"
        return self.backend.version()

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Where the client sends: one base URL, or every replica's when the group spreads requests."""
        return self.group.endpoints if self.group is not None else (self.handle.base_url,)

    @property
    def metrics_url(self) -> str:
        return self.handle.base_url + "/metrics"

    def read_effective(self, keys: Iterable[str] = ()) -> dict[str, Any] | None:
        """Read the engine's effective settings (its backend's ``effective_keys`` and ``keys``) into ``effective``."""
        doc, self.effective_source = self.backend.read_effective(self.handle.base_url)
        if doc is not None:
            self.effective = {k: lookup(doc, k) for k in dict.fromkeys([*self.backend.effective_keys, *keys])}
        return self.effective

    def reset_prefix_cache(self) -> CacheReset:
        """Reset every endpoint's cache (each replica has its own); confirmed only when every one is."""
        outcome = CacheReset.combine([self.backend.reset_prefix_cache(url) for url in self.endpoints])
        self.resets.append(outcome)
        return outcome

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend.name, "version": self.version,
                "started_by": "user" if self.given else "kit", "endpoint": self.given,
                "verification": self.verification,
                "command": self.command, "env": self.env, "pid": self.handle.pid, "settings": self.settings,
                "startup_s": round(self.startup_s, 1), "log": self.handle.log_path.name,
                "prefix_caching": self.config.prefix_caching, "exit_status": self.exit_status,
                "image": self.handle.image, "effective": self.effective, **self.group_record(),
                "cpu_placement": self.placement,
                "gpu_idle": self.gpu_idle.to_dict() if self.gpu_idle is not None else None,
                "confinement": getattr(self.handle, "confinement", None),  # a container's isolation, exceptions named
                "effective_source": self.effective_source,
                "prefix_cache_resets": {"requested": sum(r.requested for r in self.resets),
                                        "confirmed": sum(r.confirmed is True for r in self.resets),
                                        "last": self.resets[-1].to_dict() if self.resets else None}}

    def logs_text(self) -> str:
        """Every process's log: the server's, a group's members', and the replicas a Ray driver placed."""
        paths = []
        for member, handle in self.handle.members() if isinstance(self.handle, GroupHandle) else [(None, self.handle)]:
            paths.append(handle.log_path)
            report = (
                replicas_report(handle.log_tail(400)) if member is not None and member.role == "ray-driver" else None
            )
            paths += [Path(r["log"]) for r in (report or {}).get("replicas", [])]
        texts = []
        for path in paths:
            try:
                texts.append(path.read_text(errors="replace"))
            except OSError:
                continue
        return "\n".join(texts)

    def group_record(self) -> dict[str, Any]:
        """Communication settings (requested, environment, effective), the model when not the bench's, and a
        group's members (command, environment, pid, log, exit) with its launch facts."""
        out: dict[str, Any] = {
            "communication": {
                "requested": comm.requested(self.command),
                "env": comm.comm_env(self.env),
                "effective": comm.effective(self.logs_text()),
                "layout": dict(self.group.settings, spread=self.group.spread) if self.group else None,
            }
        }
        if self.model is not None:
            out["model"] = self.model.run_entry()
        if self.group is None or not isinstance(self.handle, GroupHandle):
            return out
        members = []
        for member, handle in self.handle.members():
            entry = {
                "name": member.name,
                "role": member.role,
                "command": list(member.spec.argv),
                "env": dict(member.spec.env),
                "pid": handle.pid,
                "urls": list(member.urls),
                "log": handle.log_path.name,
                "exit_status": getattr(handle, "exit_status", None),
            }
            if member.role == "ray-driver":
                entry["placement"] = replicas_report(handle.log_tail(400))
            members.append(entry)
        return {
            **out,
            "group": {
                "description": self.group.description,
                "spread": self.group.spread,
                "endpoints": list(self.endpoints),
                "settings": self.group.settings,
                "members": members,
            },
        }


@contextmanager
def server_session(
    name: str,
    backend: Backend,
    runtime: Runtime,
    config: BackendConfig,
    log_dir: Path,
    *,
    start_timeout_s: float,
    progress: Progress = print,
    settings: dict[str, Any] | None = None,
    on_start: Callable[[ServerSession], None] | None = None,
    on_stop: Callable[[ServerSession], None] | None = None,
    layout: Layout | None = None,
    model: PreparedModel | None = None,
) -> Iterator[ServerSession]:
    """Start ``backend`` under ``runtime``, wait for health, yield, and always stop the whole server.

    ``on_start`` sees the session as soon as the process exists (its pid is worth recording before the
    health wait); ``on_stop`` sees it stopped, with its exit status. A ``layout`` starts a server group.
    """
    group = group_spec(backend, config, layout, free_port, log_dir) if layout is not None else None
    spec = group.engine_spec if group is not None else backend.server_spec(config)
    where = f"{group.description}" if group is not None else f"on port {spec.port}"
    progress(
        f"server {name}: starting {backend.name} {backend.version()} {where} "
        f"(about a minute on 2 cores; a new engine configuration compiles for longer)"
    )
    idle, started = gpu_idle_before_start(name, config, progress), time.monotonic()
    handle = reaper.track(
        start_group(runtime, group, log_dir, name, health_timeout_s=start_timeout_s, progress=progress)
        if group is not None
        else runtime.start(spec, log_dir, log_name=f"server-{name}.log")
    )
    session = ServerSession(
        name=name,
        backend=backend,
        handle=handle,
        config=config,
        command=list(spec.argv),
        env=dict(spec.env),
        startup_s=0.0,
        settings=dict(settings or {}),
        group=group,
        model=model,
        placement=spec.placement,
        gpu_idle=idle,
    )
    try:
        if on_start:
            on_start(session)
        handle.wait_healthy(start_timeout_s, progress=progress)
        session.startup_s = time.monotonic() - started
        progress(f"server {name}: healthy after {session.startup_s:.0f} s")
        yield session
    finally:
        session.exit_status = handle.stop()
        reaper.untrack(handle)
        progress(f"server {name}: stopped")
        if on_stop:
            on_stop(session)


def gpu_idle_before_start(name: str, config: BackendConfig, progress: Progress) -> IdleCheck | None:
    """Read the server's GPUs before it starts (the baseline its device memory is measured from); one line when a
    device is not idle (a process on it, clocks held down) or cannot be read. None for a CPU server."""
    if not config.gpus:
        return None
    idle = idle_check(config.gpus)
    if idle.missing:
        progress(f"server {name}: GPU telemetry unavailable ({idle.missing}); device memory and energy go unmeasured")
    elif warning := idle.warning():
        progress(f"server {name}: {warning}")
    return idle


class NotApplied(ServerStartError):
    """The engine started but runs with other settings than the variant exists for (read back after the start)."""


def check_applied(expect: Mapping[str, Any], srv: ServerSession) -> None:
    """Raise ``NotApplied`` naming requested vs effective (and the engine's reason, where known) for each setting of
    ``expect`` (the engine's effective config, dotted paths) the started server did not apply."""
    effective = srv.effective
    if not expect:
        return
    if effective is None:
        raise NotApplied(
            f"the variant needs {dict(expect)} but {srv.backend.name} does not report its "
            "effective configuration, so it cannot be checked"
        )
    missed = [k for k, v in expect.items() if effective.get(k) != v]
    if missed:
        source = srv.effective_source or f"GET {srv.backend.effective_path}"
        parts = [
            f"requested {k}={expect[k]!r}, the engine runs {k}={effective.get(k)!r} (read back by "
            f"{source})" + (f": {srv.backend.override_reasons[k]}" if k in srv.backend.override_reasons else "")
            for k in missed
        ]
        raise NotApplied("; ".join(parts))


def engine_reason(message: str) -> str:
    """The engine's own reason in a refused start's log: its last exception line that is a root cause
    (not a wrapper pointing "above"); empty when there is none."""
    errors = [
        ln.strip()
        for ln in message.splitlines()
        if re.match(r"\s*([\w.]+(Error|Exception)): ", ln) and "root cause" not in ln
    ]
    return errors[-1][:300] if errors else ""


def kv_cache_config(metrics_path: Path) -> dict[str, Any] | None:
    """KV-cache capacity as the engine reports it (vLLM's ``cache_config_info`` labels), or None."""
    return kv_cache_info(parse(metrics_path.read_text()))
