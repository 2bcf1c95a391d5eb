"""The CPU default's dtype follows the host's /proc/cpuinfo flags; a named dtype always wins."""

from __future__ import annotations

from harness.backends.host_dtype import choose_dtype
from harness.rundir.fingerprint import cpu_isa

# flags lines as the kernel prints them (trimmed): a Zen-2 host, an Ice Lake host, a Sapphire Rapids host
NO_BF16 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse4_2 avx avx2 fma f16c\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu avx avx2 avx512f avx512bw avx512_vnni avx512_bf16\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"


def test_without_native_bf16_the_cpu_default_serves_float32_and_says_why():
    choice = choose_dtype("vllm-cpu", cpu_isa(NO_BF16))
    assert choice.dtype == "float32" and choice.source == "host"
    assert "no AMX or AVX-512 BF16" in choice.reason
    assert choice.record() == {"dtype": "float32", "dtype_reason": choice.reason, "dtype_source": "host"}


def test_avx512_bf16_or_amx_makes_bf16_the_default():
    assert choose_dtype("vllm-cpu", cpu_isa(AVX512_BF16)).dtype == "bfloat16"
    amx = choose_dtype("vllm-cpu", cpu_isa(AMX))
    assert amx.dtype == "bfloat16" and "amx_bf16" in amx.reason and "amx_tile" in amx.reason


def test_a_named_dtype_is_served_as_named_and_gpu_backends_keep_auto():
    assert choose_dtype("vllm-cpu", cpu_isa(AMX), "float32").source == "user"
    assert choose_dtype("vllm-cpu", cpu_isa(NO_BF16), "bfloat16").dtype == "bfloat16"
    assert choose_dtype("vllm", cpu_isa(NO_BF16)).dtype == "auto"


def test_an_unreadable_cpuinfo_is_treated_as_no_native_bf16():
    assert choose_dtype("vllm-cpu", cpu_isa("")).dtype == "float32"
