"""Layouts past one server process, built from a backend's own command line.

- ``nodes``: vLLM's own multi-node launcher. The head serves HTTP with ``--nnodes N
  --node-rank 0 --master-addr A --master-port P``; every other node runs the same engine
  arguments with its ``--node-rank`` and ``--headless`` (``vllm serve --headless``: workers
  only, no API server). On one machine each "node" is a separate process with its own CPUs.
- ``replicas``: N independent instances (data parallel outside the engine); the client
  spreads requests over their endpoints.
- ``ray``: N replicas owned by Ray actors placed one per node of a Ray cluster (head and
  workers are separate ``ray start`` processes; ``harness.runtime.ray_cluster``).

``Layout.env`` gives each node or replica its own environment (on the CPU default, its
cores: ``VLLM_CPU_OMP_THREADS_BIND``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from harness.backends.base import Backend, BackendConfig
from harness.errors import CapabilityMissing, InvalidInput
from harness.runtime.base import HARNESS_MOUNT, ServerSpec
from harness.runtime.gpus import Device
from harness.runtime.group import GroupMember, GroupSpec

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# `vllm serve` without the `vllm` console script (the vllm-cpu distribution breaks its metadata lookup).
SERVE_SHIM = Path(__file__).with_name("vllm_serve.py")
LayoutKind = Literal["nodes", "replicas", "ray"]


@dataclass(frozen=True)
class Layout:
    """How one server variant spans processes: ``count`` nodes or replicas, each with its own environment."""

    kind: LayoutKind
    count: int = 2
    env: tuple[Mapping[str, str], ...] = ()  # per node / replica, e.g. ({"VLLM_CPU_OMP_THREADS_BIND": "0"}, ...)
    master_addr: str = "127.0.0.1"
    settings: Mapping[str, object] = field(default_factory=dict)  # extra facts for the record
    gpus: tuple[tuple[Device, ...], ...] = ()  # per node / replica: its devices (the bench places them); () = config

    def __post_init__(self) -> None:
        if self.kind not in ("nodes", "replicas", "ray"):
            raise InvalidInput(f"unknown layout {self.kind!r}: choose nodes, replicas or ray")
        if self.count < 1:
            raise InvalidInput(f"a {self.kind} layout needs at least one member, got {self.count}")
        for what, given in (("environments", self.env), ("device lists", self.gpus)):
            if given and len(given) != self.count:
                raise InvalidInput(f"a {self.kind} layout of {self.count} needs {self.count} {what}, got {len(given)}")

    def env_of(self, index: int) -> dict[str, str]:
        return dict(self.env[index]) if self.env else {}

    def gpus_of(self, index: int, cfg: BackendConfig) -> tuple[Device, ...]:
        return self.gpus[index] if self.gpus else cfg.gpus


def node_args(nnodes: int, node_rank: int, master_addr: str, master_port: int | None = None) -> tuple[str, ...]:
    """vLLM's multi-node launcher flags (mp backend); the same engine flags go to every node."""
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise InvalidInput(f"--node-rank must be in [0, {nnodes - 1}] for --nnodes {nnodes}, got {node_rank}")
    args = ("--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", master_addr)
    return args + (("--master-port", str(master_port)) if master_port else ())


def headless_argv(spec: ServerSpec, in_container: bool = False) -> tuple[str, ...]:
    """A follower's command: the head's engine flags under ``vllm serve --headless`` (in a container, the shim
    by its path under the read-only harness mount: the host path is not there)."""
    argv = spec.argv
    if len(argv) < 3 or argv[1:3] != ("-m", API_SERVER_MODULE):
        raise CapabilityMissing(f"no headless follower form for the command {' '.join(argv[:3])}")
    shim = f"{HARNESS_MOUNT}/harness/backends/{SERVE_SHIM.name}" if in_container else str(SERVE_SHIM)
    return (argv[0], shim, *argv[3:], "--headless")


def _with(cfg: BackendConfig, port: int, env: Mapping[str, str], extra: tuple[str, ...] = (),
          gpus: tuple[Device, ...] | None = None) -> BackendConfig:
    return replace(cfg, port=port, extra_env={**cfg.extra_env, **env}, extra_args=(*cfg.extra_args, *extra),
                   gpus=cfg.gpus if gpus is None else gpus)


def _url(spec: ServerSpec) -> str:
    return f"http://{spec.host}:{spec.port}"


def nodes_group(backend: Backend, cfg: BackendConfig, layout: Layout, master_port: int) -> GroupSpec:
    members = []
    for rank in range(layout.count):
        flags = node_args(layout.count, rank, layout.master_addr, master_port)
        spec = backend.server_spec(_with(cfg, cfg.port, layout.env_of(rank), flags, layout.gpus_of(rank, cfg)))
        # nodes reach each other's torch.distributed port and shared memory: host network and IPC in containers
        spec = replace(spec, host_network=True)
        if rank == 0:
            members.append(GroupMember("node0", spec, urls=(_url(spec),), role="head"))
        else:
            follower = replace(spec, argv=headless_argv(spec, cfg.in_container))
            members.append(GroupMember(f"node{rank}", follower, role="follower"))
    return GroupSpec(tuple(members), "one", f"{layout.count} nodes through vLLM's multi-node launcher "
                     f"(head + {layout.count - 1} headless follower(s), master {layout.master_addr}:{master_port})",
                     {"nnodes": layout.count, "master_addr": layout.master_addr, "master_port": master_port,
                      **layout.settings})


def replica_specs(backend: Backend, cfg: BackendConfig, layout: Layout, ports: list[int],
                  node_env: bool = False) -> list[ServerSpec]:
    """One server per replica on its own port; ``node_env`` leaves the per-member environment to the node."""
    return [backend.server_spec(_with(cfg, port, {} if node_env else layout.env_of(i), gpus=layout.gpus_of(i, cfg)))
            for i, port in enumerate(ports)]


def shared_gpus(specs: list[ServerSpec]) -> list[Device]:
    """The GPUs more than one of ``specs`` uses, in first-use order."""
    seen: dict[Device, int] = {}
    for spec in specs:
        for gpu in dict.fromkeys(spec.gpus):
            seen[gpu] = seen.get(gpu, 0) + 1
    return [g for g, n in seen.items() if n > 1]


def group_spec(backend: Backend, cfg: BackendConfig, layout: Layout, free_port: Callable[[], int],
               log_dir: Path) -> GroupSpec:
    """The processes of ``layout`` for ``backend`` at ``cfg`` (ports taken from ``free_port``)."""
    if layout.kind == "nodes":
        return nodes_group(backend, cfg, layout, free_port())
    ports = [cfg.port, *(free_port() for _ in range(layout.count - 1))]
    if layout.kind == "replicas":
        specs = replica_specs(backend, cfg, layout, ports)
        shared = shared_gpus(specs)
        members = tuple(GroupMember(f"replica{i}", s, urls=(_url(s),), role="replica", healthy_first=bool(shared))
                        for i, s in enumerate(specs))
        one_by_one = f", started one after another (they share GPU {','.join(map(str, shared))})" if shared else ""
        return GroupSpec(members, "client", f"{layout.count} independent replicas, requests spread by the client"
                         + one_by_one, {"replicas": layout.count, **layout.settings})
    from harness.runtime.ray_cluster import ray_group

    specs = replica_specs(backend, cfg, layout, ports, node_env=True)
    return ray_group(specs, [layout.env_of(i) for i in range(layout.count)], gcs_port=free_port(), log_dir=log_dir,
                     settings=dict(layout.settings))
