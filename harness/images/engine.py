"""The container engine this host offers: a Docker Engine API socket (Docker, or podman's service)."""

from __future__ import annotations

import os
from pathlib import Path


def docker_engine_present() -> bool:
    """A Docker-API engine is reachable by ``DOCKER_HOST`` (default: the Docker socket)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        return Path(host.removeprefix("unix://")).exists()
    return bool(host)
