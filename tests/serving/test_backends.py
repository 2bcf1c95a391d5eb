"""Backend launch specs: exact command lines and environments."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.backends import BackendConfig, get_backend
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.errors import InvalidInput
from harness.runtime.serving_env import VLLM_CPU, ServingEnv


def cfg(**kw) -> BackendConfig:
    return BackendConfig(model_dir="/models/smol", served_model_name="smol", port=8123, **kw)


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_vllm_cpu_runs_the_module_from_the_serving_venv():
    env = ServingEnv(path=Path("/cache/venvs/vllm-cpu-x"), spec=VLLM_CPU)
    spec = VllmCpuBackend(env).server_spec(cfg(max_num_seqs=8))
    assert spec.argv[:3] == ("/cache/venvs/vllm-cpu-x/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert flag_value(spec.argv, "--model") == "/models/smol"
    assert flag_value(spec.argv, "--served-model-name") == "smol"
    assert flag_value(spec.argv, "--port") == "8123" and spec.port == 8123
    assert flag_value(spec.argv, "--max-num-seqs") == "8"
    assert "--enable-prefix-caching" in spec.argv and "--no-enable-prefix-caching" not in spec.argv
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert spec.env["HF_HUB_OFFLINE"] == "1" and spec.env["VLLM_USE_AOT_COMPILE"] == "0"
    assert spec.gpus == () and spec.role == "inf-vllm-cpu"


def test_a_local_vllm_cpu_server_compiles_into_a_cache_of_its_isa_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    for var in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(var, raising=False)
    backend = VllmCpuBackend(ServingEnv(path=Path("/v"), spec=VLLM_CPU))
    native = backend.server_spec(cfg()).env["TORCHINDUCTOR_CACHE_DIR"]
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    limited = backend.server_spec(cfg()).env["TORCHINDUCTOR_CACHE_DIR"]
    # a cache written under the limits crashed a full-ISA fp32 start: the two never share one
    assert native == str(tmp_path / "torchinductor" / "native") and limited != native
    assert Path(limited).parent == Path(native).parent and "avx2" in Path(limited).name
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")  # the user's own setting wins
    assert backend.server_spec(cfg()).env["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    assert "TORCHINDUCTOR_CACHE_DIR" not in backend.server_spec(cfg(in_container=True)).env  # the image sets its own


def test_prefix_caching_off_is_explicit():
    env = ServingEnv(path=Path("/v"), spec=VLLM_CPU)
    argv = VllmCpuBackend(env).server_spec(cfg(prefix_caching=False, kv_cache_space_gib=4)).argv
    assert "--no-enable-prefix-caching" in argv and "--enable-prefix-caching" not in argv


def test_gpu_vllm_spec_targets_its_image_role():
    backend = get_backend("vllm")
    spec = backend.server_spec(cfg(gpus=(1,)))
    assert backend.role == "inf-vllm-011-cu128" and backend.version() == "0.11.0"
    assert spec.argv[:3] == ("python3", "-m", "vllm.entrypoints.openai.api_server")
    assert flag_value(spec.argv, "--model") == "/models/smol" and spec.gpus == (1,)
    assert "--gpu-memory-utilization" in spec.argv


def test_sglang_spec_and_counters():
    backend = get_backend("sglang")
    spec = backend.server_spec(cfg(prefix_caching=False, gpus=(0,)))
    assert spec.argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert "--disable-radix-cache" in spec.argv and "--enable-metrics" in spec.argv
    assert backend.hit_counter == "sglang:cached_tokens_total" and backend.reset_path == "/flush_cache"
    assert backend.role == "sglang" and backend.version() == "0.5.5"


@pytest.mark.parametrize("name", ["vllm", "sglang", "vllm-cpu"])
def test_container_roles_have_image_locks(name, repo_root):
    assert (repo_root / "images" / f"{get_backend(name).role}.lock.json").is_file()


def test_vllm_cpu_in_its_image_uses_the_image_python():
    env = ServingEnv(path=Path("/v"), spec=VLLM_CPU)
    spec = VllmCpuBackend(env).server_spec(cfg(in_container=True))
    assert spec.argv[:3] == ("python", "-m", "vllm.entrypoints.openai.api_server")


def test_unknown_backend_names_the_choices():
    with pytest.raises(InvalidInput, match="sglang"):
        get_backend("tgi")


def test_eager_is_asked_for_only_when_set():
    env = ServingEnv(path=Path("/v"), spec=VLLM_CPU)
    assert "--enforce-eager" not in VllmCpuBackend(env).server_spec(cfg()).argv
    assert "--enforce-eager" in VllmCpuBackend(env).server_spec(cfg(enforce_eager=True)).argv
