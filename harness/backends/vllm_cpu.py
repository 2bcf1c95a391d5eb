"""vllm-cpu: vLLM's CPU backend from its own serving venv (the embedded default)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from harness.backends.base import VLLM_EFFECTIVE_KEYS, Backend, BackendConfig, vllm_server_args
from harness.backends.cpu_placement import allowed_cores, placement
from harness.contract.paths import cache_root
from harness.runtime.base import ServerSpec
from harness.runtime.serving_env import VLLM_CPU, ServingEnv, ensure_serving_env


class VllmCpuBackend(Backend):
    name = "vllm-cpu"
    role = "inf-vllm-cpu"
    runtimes = ("local", "docker")  # docker: the inf-vllm-cpu image, whose venv is on PATH
    hit_counter = "vllm:prefix_cache_hits_total"
    query_counter = "vllm:prefix_cache_queries_total"
    reset_path = "/reset_prefix_cache"
    config_info_metric = "vllm:cache_config_info"
    effective_path, effective_root, effective_keys = (
        "/server_info?config_format=json",
        "vllm_config",
        VLLM_EFFECTIVE_KEYS,
    )

    def __init__(self, env: ServingEnv | None = None):
        self._env = env

    @property
    def env(self) -> ServingEnv:
        if self._env is None:
            self._env = ensure_serving_env(VLLM_CPU)
        return self._env

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        # The distribution is named vllm-cpu, so the `vllm` console script fails its
        # metadata lookup; the module entry point works.
        python = "python" if cfg.in_container else str(self.env.python)
        argv = (python, "-m", "vllm.entrypoints.openai.api_server", *vllm_server_args(cfg))
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(cfg.kv_cache_space_gib),
            "VLLM_SERVER_DEV_MODE": "1",  # exposes POST /reset_prefix_cache
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            # vllm-cpu 0.32.0 fails to reload its AOT-compiled graph ("'function' object has no
            # attribute 'finalize_loading'") and recompiles on every start; the regular compile
            # cache does reload (server ready in ~60 s instead of ~100 s on 2 cores).
            "VLLM_USE_AOT_COMPILE": "0",
            "DO_NOT_TRACK": "1",
            **cfg.extra_env,
        }
        if not cfg.in_container:
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", compile_cache({**os.environ, **env}))
        # a container inherits none of this process's environment; a local server inherits all of it
        bind, placed = placement(cfg.extra_env, {} if cfg.in_container else os.environ, allowed_cores(),
                                 cfg.extra_args)
        return ServerSpec(argv=argv, port=cfg.port, env={**env, **bind}, role=self.role, host=cfg.host,
                          placement=placed)

    def native_python(self) -> str | None:
        return str(self.env.python)

    def version(self) -> str:
        return self.env.package_version("vllm-cpu") or VLLM_CPU.install[0].split("==")[1]


# The variables that hold torch and oneDNN below the CPU's own ISA (docs/benches.md: two hosts at one size).
# TorchInductor's cache key leaves them out: kernels it compiled under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
# and read back by a full-ISA fp32 start crashed vllm-cpu 0.32.0 at warm-up (glibc: "corrupted size vs. prev_size"),
# every time, on an AVX-512 BF16 host; a cache of its own for each setting starts both.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def compile_cache(env: Mapping[str, str]) -> str:
    """A local server's TorchInductor cache, one for each setting of ``ISA_LIMITS`` (the user's own
    TORCHINDUCTOR_CACHE_DIR wins)."""
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        return env["TORCHINDUCTOR_CACHE_DIR"]
    limits = [f"{k.lower()}-{env[k]}" for k in ISA_LIMITS if env.get(k)]
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(limits)) or "native"
    return str(cache_root() / "torchinductor" / key)


BACKEND = VllmCpuBackend
