"""vllm: the GPU serving role INF-VLLM-011-CU128, run from its pinned image by the docker runtime."""

from __future__ import annotations

from harness.backends.base import (
    VLLM_EFFECTIVE_KEYS,
    Backend,
    BackendConfig,
    gpu_devices,
    vllm_server_args,
)
from harness.runtime.base import ServerSpec

VLLM_GPU_VERSION = "0.11.0"  # vllm/vllm-openai:v0.11.0 (torch 2.8.0, CUDA 12.8)


class VllmBackend(Backend):
    name = "vllm"
    role = "inf-vllm-011-cu128"
    runtimes = ("docker",)
    hit_counter = "vllm:prefix_cache_hits_total"
    query_counter = "vllm:prefix_cache_queries_total"
    reset_path = "/reset_prefix_cache"
    config_info_metric = "vllm:cache_config_info"
    effective_path, effective_root, effective_keys = (
        "/server_info?config_format=json",
        "vllm_config",
        VLLM_EFFECTIVE_KEYS,
    )

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        # The docker runtime rewrites --host so the server listens inside the container and
        # mounts the model directory named on the command line read-only.
        args = [*vllm_server_args(cfg), "--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
        argv = ("python3", "-m", "vllm.entrypoints.openai.api_server", *args)
        env = {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **cfg.extra_env}
        return ServerSpec(
            argv=argv,
            port=cfg.port,
            env=env,
            role=self.role,
            gpus=gpu_devices(self.name, cfg),
            shm_bytes=8 << 30,
            host=cfg.host,
            # A Ray driver joining RAY_ADDRESS reaches the cluster's raylet and GCS on the host's addresses, and its
            # workers call back into the driver: a bridge-networked container is reachable by neither.
            host_network=cfg.in_container and "RAY_ADDRESS" in env,
        )

    def version(self) -> str:
        return VLLM_GPU_VERSION


BACKEND = VllmBackend
