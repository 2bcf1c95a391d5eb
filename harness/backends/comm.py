"""Communication settings of a parallel server: requested (command line, environment) and effective (its log).

- ``requested(argv)``: tensor/pipeline/data parallel sizes, nodes, executor backend from vLLM's
  flags, and the world size and ranks per node they imply;
- ``comm_env(env)``: the NCCL_*, GLOO_*, Ray and vLLM parallel variables a server ran with;
- ``effective(log)``: what the engine reports (each rank's ``world_size=… rank=… backend=…`` line and
  its DP/PP/TP assignment), so a setting the engine changed is seen, not assumed;
- ``topology(nvml)``: how the GPUs are connected (NVML common ancestor per pair, active NVLinks),
  or why there is nothing to say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.contract.secrets import safe_env

FLAGS = {"--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
         "--pipeline-parallel-size": "pipeline_parallel_size", "-pp": "pipeline_parallel_size",
         "--data-parallel-size": "data_parallel_size", "-dp": "data_parallel_size",
         "--nnodes": "nnodes", "-n": "nnodes", "--node-rank": "node_rank", "-r": "node_rank",
         "--master-addr": "master_addr", "--master-port": "master_port",
         "--distributed-executor-backend": "distributed_executor_backend",
         "--data-parallel-backend": "data_parallel_backend"}
ENV_PREFIXES = ("NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RAY_", "VLLM_HOST_IP",
                "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_SIM_MULTI_NUMA", "VLLM_PP_", "VLLM_DP_", "VLLM_ALL2ALL",
                "VLLM_ALLREDUCE", "VLLM_DISTRIBUTED", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_USE_RAY", "VLLM_RAY_",
                "VLLM_SKIP_P2P", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
RANK_LINE = re.compile(r"world_size=(\d+) rank=(\d+) local_rank=(\d+) distributed_init_method=(\S+) backend=(\w+)")
ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as DP rank (\d+), PP rank (\d+), .*?TP rank (\d+)")



def requested(argv: Sequence[str]) -> dict[str, Any]:
    """Parallel settings named on a vLLM command line, with the world size and ranks per node they imply."""
    out: dict[str, Any] = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1,
                           "nnodes": 1, "distributed_executor_backend": None, "headless": "--headless" in argv}
    words = list(argv)
    for i, word in enumerate(words):
        key, value = (word.split("=", 1) + [None])[:2] if word.startswith("--") and "=" in word else (word, None)
        if key in FLAGS:
            value = value if value is not None else (words[i + 1] if i + 1 < len(words) else None)
            field = FLAGS[key]
            out[field] = int(value) if value is not None and value.isdigit() else value
    within_dp = out["tensor_parallel_size"] * out["pipeline_parallel_size"]
    out["world_size"] = within_dp * out["data_parallel_size"]
    out["ranks_per_node"] = out["world_size"] // max(1, out["nnodes"])
    return out


def comm_env(env: Mapping[str, str]) -> dict[str, str]:
    """The communication and parallel variables of an environment (others, and credentials, left out)."""
    return safe_env(env, ENV_PREFIXES)


def effective(log_text: str) -> dict[str, Any]:
    """What the engine's log says about its ranks: world size, backend, init method and rank assignments."""
    ranks = [{"world_size": int(w), "rank": int(r), "local_rank": int(lr), "init_method": m, "backend": b}
             for w, r, lr, m, b in RANK_LINE.findall(log_text)]
    assigned = [{"rank": int(r), "world_size": int(w), "dp_rank": int(dp), "pp_rank": int(pp), "tp_rank": int(tp)}
                for r, w, dp, pp, tp in ASSIGNED.findall(log_text)]
    out: dict[str, Any] = {"ranks": ranks, "assignments": assigned}
    # vLLM logs the world_size/backend line at DEBUG and the rank assignments at INFO (the default level)
    seen = ranks or assigned
    if seen:
        out["world_size"] = max(r["world_size"] for r in seen)
        out["backends"] = sorted({r["backend"] for r in ranks}) or None
        out["source"] = ("rank lines (DEBUG)" if ranks else
                         "rank assignments (INFO); the backend is logged at DEBUG only (VLLM_LOGGING_LEVEL=DEBUG)")
    return out
