"""The served dtype a CPU backend defaults to, chosen from the host's instruction set.

Without AMX or AVX-512 BF16, oneDNN emulates bf16 matmuls through fp32 conversions: one such 2-core host
served a 1056-token prompt in TTFT P50 7.9 s under bf16, and its fp32 capacity was 8x its bf16 capacity
(docs/bench-72.md). With AMX the same prefill is about 10x faster in bf16. So bf16 is the default only
where the CPU has native bf16 arithmetic; a dtype the user names is always served as named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SERVED_DTYPES = ("bfloat16", "float16", "float32", "auto")  # what a --dtype may name (the engines' own words)
NATIVE_BF16 = ("amx_bf16", "amx_tile", "avx512_bf16")  # x86 extensions with native bf16 dot products
CPU_BACKENDS = ("vllm-cpu",)


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a server is started with, and why (recorded in run.json's ``effective``)."""

    dtype: str
    reason: str
    source: str  # "user", "host" or "backend"

    def record(self) -> dict[str, str]:
        return {"dtype": self.dtype, "dtype_reason": self.reason, "dtype_source": self.source}


def choose_dtype(backend: str, isa: Sequence[str], requested: str | None = None) -> DtypeChoice:
    """``requested`` when given; on a CPU backend bf16 with native bf16 in ``isa``, else float32; else ``auto``."""
    if requested:
        return DtypeChoice(requested, f"asked for --dtype {requested}", "user")
    if backend not in CPU_BACKENDS:
        return DtypeChoice("auto", f"{backend}: the model's own dtype (the engine's 'auto')", "backend")
    native = [name for name in NATIVE_BF16 if name in isa]
    if native:
        return DtypeChoice("bfloat16", f"the CPU has native bf16 ({', '.join(native)})", "host")
    return DtypeChoice("float32", "the CPU has no AMX or AVX-512 BF16 (/proc/cpuinfo flags): bf16 would be "
                       "emulated, several times slower than float32", "host")
