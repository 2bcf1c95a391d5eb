"""sglang: the optional like-for-like GPU backend for projects 69, 70 and 72 (its own image)."""

from __future__ import annotations

from typing import Any

from harness.backends.base import Backend, BackendConfig, gpu_devices
from harness.runtime.base import ServerSpec

SGLANG_VERSION = "0.5.5"  # as pinned by images/sglang.lock.json (torch 2.8.0)


class SglangBackend(Backend):
    name = "sglang"
    role = "sglang"  # images/sglang.lock.json
    runtimes = ("docker",)
    # SGLang counts prompt tokens served from the radix cache against all prompt tokens.
    hit_counter = "sglang:cached_tokens_total"
    query_counter = "sglang:prompt_tokens_total"
    reset_path = "/flush_cache"
    reset_status_is_verdict = True  # 400 while requests run or wait: nothing was flushed
    effective_path = "/get_server_info"  # its server arguments as it runs, flat

    def effective_config(self, base_url: str, timeout_s: float = 30.0) -> dict[str, Any] | None:
        """The server arguments, and the radix cache's state under vLLM's name, so one ``expect`` reads both."""
        doc = super().effective_config(base_url, timeout_s)
        if doc is None:
            return None
        return {**doc, "cache_config": {"enable_prefix_caching": not doc.get("disable_radix_cache", False)}}

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        args = [
            "--model-path", cfg.model_dir,
            "--served-model-name", cfg.served_model_name,
            "--host", cfg.host,  # the docker runtime rewrites it to listen inside the container
            "--port", str(cfg.port),
            "--context-length", str(cfg.max_model_len),
            "--dtype", cfg.dtype,
            "--random-seed", str(cfg.seed),
            "--mem-fraction-static", str(cfg.gpu_memory_utilization),
            "--enable-metrics",
        ]
        if not cfg.prefix_caching:
            args.append("--disable-radix-cache")
        if cfg.max_num_batched_tokens:
            args += ["--chunked-prefill-size", str(cfg.max_num_batched_tokens)]
        if cfg.max_num_seqs:
            args += ["--max-running-requests", str(cfg.max_num_seqs)]
        if cfg.enforce_eager:
            args.append("--disable-cuda-graph")
        argv = ("python3", "-m", "sglang.launch_server", *args, *cfg.extra_args)
        env = {"HF_HUB_OFFLINE": "1", **cfg.extra_env}
        return ServerSpec(argv=argv, port=cfg.port, env=env, role=self.role, gpus=gpu_devices(self.name, cfg),
                          shm_bytes=8 << 30, host=cfg.host)

    def version(self) -> str:
        return SGLANG_VERSION


BACKEND = SglangBackend
