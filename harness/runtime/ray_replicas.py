"""Data-parallel replicas owned by Ray actors, one per node of a running Ray cluster; run with the Ray venv's python.

Standalone on purpose (the Ray venv has Ray but not infkit). The driver joins the cluster
at ``--address``, waits for ``--nodes`` alive nodes, reserves one bundle per node with a
STRICT_SPREAD placement group (so no two replicas share a node), and starts one actor per
bundle; each actor launches its replica's server command as a child process with the
node's environment under the replica's own (on the CPU default the node's environment
carries its cores). The driver prints one line ``INFKIT_RAY_REPLICAS <json>`` (node id,
pid, url per replica), then watches: a replica that exits ends the driver with status 3;
SIGINT or SIGTERM stops every replica and exits 0.

Usage: python ray_replicas.py --address HOST:PORT --nodes N --plan JSON
  plan: [{"argv": [...], "env": {...}, "url": "http://...", "log": "path"}, ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

WATCH_S = 1.0
NODES_TIMEOUT_S = 120.0


def replica_actor(ray):
    @ray.remote(num_cpus=1)
    class Replica:
        """One replica's server process on this actor's node."""

        def __init__(self) -> None:
            self.proc: subprocess.Popen | None = None

        def start(self, argv: list[str], env: dict[str, str], log: str) -> dict:
            with open(log, "ab", buffering=0) as fh:
                fh.write(("$ " + " ".join(argv) + "\n").encode())
                # The replica is this worker's child in its process group: stopping the node's
                # `ray start` process group can never leave it behind.
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                             env={**os.environ, **env})
            ctx = ray.get_runtime_context()
            return {"node_id": ctx.get_node_id(), "pid": self.proc.pid, "actor_pid": os.getpid(),
                    "node_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_CPU_OMP")}}

        def poll(self) -> int | None:
            return None if self.proc is None else self.proc.poll()

        def stop(self, timeout_s: float = 20.0) -> int | None:
            if self.proc is None:
                return None
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            return self.proc.returncode

    return Replica


def wait_nodes(ray, count: int) -> list[dict]:
    deadline = time.monotonic() + NODES_TIMEOUT_S
    while True:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise SystemExit(f"the Ray cluster has {len(nodes)} alive node(s), {count} needed")
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--plan", required=True)
    args = ap.parse_args(argv)
    plan = json.loads(args.plan)

    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    stopping = False

    def on_signal(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ray.init(address=args.address, logging_level="WARNING", log_to_driver=False)
    nodes = wait_nodes(ray, args.nodes)
    group = placement_group([{"CPU": 1}] * len(plan), strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=NODES_TIMEOUT_S)
    actor = replica_actor(ray)
    actors = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
                            ).remote() for i in range(len(plan))]
    placed = ray.get([a.start.remote(p["argv"], p.get("env", {}), p["log"]) for a, p in zip(actors, plan, strict=True)])
    report = {"ray_version": ray.__version__, "nodes": [n["NodeID"] for n in nodes],
              "replicas": [{**r, "url": p["url"], "log": p["log"]} for r, p in zip(placed, plan, strict=True)]}
    print("INFKIT_RAY_REPLICAS " + json.dumps(report), flush=True)
    status = 0
    while not stopping:
        codes = ray.get([a.poll.remote() for a in actors])
        ended = [(i, c) for i, c in enumerate(codes) if c is not None]
        if ended:
            print(f"replica {ended[0][0]} exited with status {ended[0][1]}", flush=True)
            status = 3
            break
        time.sleep(WATCH_S)
    codes = ray.get([a.stop.remote() for a in actors])
    print(f"replicas stopped: exit statuses {codes}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
