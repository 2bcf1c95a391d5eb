"""Fingerprint: schema-valid on this machine, NVML paths against a fake NVML module."""

from __future__ import annotations

import json
import types
from collections import namedtuple

from harness.cli import main
from harness.contract.schemas import validate_document
from harness.rundir import fingerprint


def fake_nvml(devices=1, fail_init=False, fail_serial=False):
    nv = types.ModuleType("fake_pynvml")
    Mem = namedtuple("Mem", "total free used")
    Pci = namedtuple("Pci", "busId")
    nv.NVML_CLOCK_GRAPHICS, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 0, 1, 2
    nv.nvmlClocksEventReasonGpuIdle = 0x1
    nv.nvmlClocksEventReasonSwPowerCap = 0x4
    nv.nvmlClocksEventReasonAll = 0xFF
    calls = {"shutdown": 0}

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def serial(h):
        if fail_serial:
            raise NVMLError("Not Supported")
        return f"SERIAL-{h}"

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)
    nv.nvmlSystemGetDriverVersion = lambda: b"570.86.15"
    nv.nvmlSystemGetCudaDriverVersion = lambda: 12080
    nv.nvmlSystemGetNVMLVersion = lambda: "12.570.86.15"
    nv.nvmlDeviceGetCount = lambda: devices
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-0000-{h}"
    nv.nvmlDeviceGetSerial = serial
    nv.nvmlDeviceGetVbiosVersion = lambda h: "96.00.99.00.01"
    nv.nvmlDeviceGetPciInfo = lambda h: Pci(f"00000000:{h:02X}:00.0".encode())
    nv.nvmlDeviceGetMemoryInfo = lambda h: Mem(150_000_000_000, 149_000_000_000, 1_000_000_000)
    nv.nvmlDeviceGetEccMode = lambda h: (1, 1)
    nv.nvmlDeviceGetPersistenceMode = lambda h: 1
    nv.nvmlDeviceGetMigMode = lambda h: (0, 0)
    nv.nvmlDeviceGetPowerManagementLimit = lambda h: 700000
    nv.nvmlDeviceGetClockInfo = lambda h, t: [1980, 1980, 3201][t]
    nv.nvmlDeviceGetMaxClockInfo = lambda h, t: [1980, 1980, 3201][t]
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x5
    nv.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 0  # NVML_TOPOLOGY_INTERNAL: same board
    nv.NVML_NVLINK_MAX_LINKS = 18
    nv.nvmlDeviceGetNvLinkState = lambda h, link: int(link < 4)
    nv.calls = calls
    return nv


def test_fake_nvml_two_gpus_schema_valid():
    nv = fake_nvml(devices=2)
    doc = fingerprint.collect(nvml=nv)
    assert validate_document(doc) == []
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    gpu = doc["gpus"][1]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid_sha256"] == fingerprint.sha256_hex("GPU-0000-1")
    assert "GPU-0000" not in json.dumps(doc)  # raw UUIDs never leave the machine
    assert "SERIAL" not in json.dumps(doc)
    assert gpu["pci_bus_id"] == "00000000:01:00.0"
    assert gpu["compute_capability"] == "9.0"
    assert gpu["power_limit_w"] == 700.0
    assert gpu["ecc_mode"] == "enabled" and gpu["mig_mode"] == "disabled"
    assert gpu["clocks_mhz"] == {"graphics": 1980, "sm": 1980, "memory": 3201}
    assert gpu["clock_event_reasons"] == ["GpuIdle", "SwPowerCap"]
    assert doc["nvml"] == {"driver_version": "570.86.15", "cuda_driver_version": "12.8", "nvml_version": "12.570.86.15"}
    assert doc["gpus_absent_reason"] is None
    assert doc["topology"] == {"gpus": 2, "nvlinks_active": [4, 4], "reason": None,
                               "pairs": [{"gpus": [0, 1], "level": 0, "link": "same board"}]}
    assert nv.calls["shutdown"] == 2  # one NVML session for the devices, one for their topology, each closed


def test_fake_nvml_unsupported_query_is_null_not_crash():
    doc = fingerprint.collect(nvml=fake_nvml(fail_serial=True))
    assert validate_document(doc) == []
    assert doc["gpus"][0]["serial_sha256"] is None


def test_nvml_init_failure_gives_reason():
    doc = fingerprint.collect(nvml=fake_nvml(fail_init=True))
    assert doc["gpus"] == []
    assert "Driver Not Loaded" in doc["gpus_absent_reason"]
    assert doc["topology"]["gpus"] == 0 and "Driver Not Loaded" in doc["topology"]["reason"]
    assert validate_document(doc) == []


def test_zero_devices_gives_reason():
    doc = fingerprint.collect(nvml=fake_nvml(devices=0))
    assert doc["gpus"] == [] and doc["gpus_absent_reason"] == "NVML found no GPU devices"


def test_this_machine_json_is_valid(capsys):
    assert main(["fingerprint", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert validate_document(doc) == []
    if not doc["gpus"]:
        assert doc["gpus_absent_reason"]


def test_env_allow_list_drops_secrets():
    env = fingerprint.allowed_env({
        "CUDA_VISIBLE_DEVICES": "0", "VLLM_API_KEY": "s3cret", "HF_TOKEN": "hf_x", "OMP_NUM_THREADS": "2",
        "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root", "NCCL_DEBUG": "INFO",
    })
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "2"}


def test_git_state_reports_commit_and_dirty_flag(tmp_path):
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a").write_text("1")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
                   check=True)
    commit, dirty = fingerprint.git_state(tmp_path)
    assert len(commit) == 40 and dirty is False
    (tmp_path / "a").write_text("2")
    assert fingerprint.git_state(tmp_path) == (commit, True)
    outside = tmp_path / "missing-dir"
    assert fingerprint.git_state(outside) == (None, None)


def test_git_state_inside_an_image_comes_from_the_runner(tmp_path, monkeypatch):
    monkeypatch.setenv("INFKIT_HARNESS_GIT_COMMIT", "a" * 40)
    monkeypatch.setenv("INFKIT_HARNESS_GIT_DIRTY", "1")
    assert fingerprint.git_state(tmp_path / "no-git-here") == ("a" * 40, True)
    monkeypatch.setenv("INFKIT_HARNESS_GIT_DIRTY", "0")
    assert fingerprint.git_state(tmp_path / "no-git-here") == ("a" * 40, False)


def test_cpu_isa_lists_the_speed_relevant_extensions_in_a_fixed_order():
    from harness.rundir.fingerprint import cpu_isa

    x86 = "processor\t: 0\nflags\t\t: fpu sse4_2 avx2 avx512f amx_tile amx_bf16 avx512_bf16 ht\nprocessor\t: 1\n"
    assert cpu_isa(x86) == ["sse4_2", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    assert cpu_isa("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n") == ["asimd", "sve", "bf16", "i8mm"]
    assert cpu_isa("model name\t: something\n") == []


def _cgroup_tree(tmp_path, proc: str, files: dict[str, str]):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc").write_text(proc)
    for rel, text in files.items():
        (tmp_path / "fs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / rel).write_text(text)
    return fingerprint.cpu_quota(tmp_path / "proc", tmp_path / "fs")


def test_cpu_quota_reads_cgroup_v1_and_v2_and_takes_the_tightest_ancestor(tmp_path):
    v1 = _cgroup_tree(tmp_path / "v1", "4:memory:/x\n1:cpu,cpuacct:/jobs/bench\n", {
        "cpu,cpuacct/jobs/bench/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/jobs/bench/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/jobs/cpu.cfs_quota_us": "150000\n", "cpu,cpuacct/jobs/cpu.cfs_period_us": "100000\n"})
    assert v1 == {"cores": 1.5, "period_ms": 100.0, "cgroup": "/jobs"}  # the child is unlimited, its parent is not
    v2 = _cgroup_tree(tmp_path / "v2", "0::/kubepods/pod1\n", {
        "kubepods/pod1/cpu.max": "50000 100000\n", "kubepods/cpu.max": "max 100000\n"})
    assert v2 == {"cores": 0.5, "period_ms": 100.0, "cgroup": "/kubepods/pod1"}
    # inside a container the listed path is the host's; the container's own mount root holds its limit
    boxed = _cgroup_tree(tmp_path / "box", "0::/system.slice/docker-1.scope\n", {"cpu.max": "200000 100000\n"})
    assert boxed == {"cores": 2.0, "period_ms": 100.0, "cgroup": "/"}
    assert _cgroup_tree(tmp_path / "none", "0::/\n", {"cpu.max": "max 100000\n"}) is None
    assert fingerprint.cpu_quota(tmp_path / "missing", tmp_path) is None
    doc = fingerprint.collect(nvml=fake_nvml(devices=0))  # the field is in the schema either way
    doc["host"]["cpu_quota"] = v1
    assert validate_document(doc) == []


def test_doctor_names_a_quota_that_can_bind_and_its_stall():
    from harness.commands.doctor import quota_note

    coarse = quota_note({"cores": 1.0, "period_ms": 100.0, "cgroup": "/slow"}, 2)
    assert coarse and "1 of 2 cores per 100 ms" in coarse and "up to 50 ms" in coarse and "10 ms or less" in coarse
    fine = quota_note({"cores": 1.0, "period_ms": 10.0, "cgroup": "/slow"}, 2)
    assert fine and "up to 5 ms" in fine and "10 ms or less" not in fine
    assert quota_note({"cores": 2.0, "period_ms": 100.0, "cgroup": "/"}, 2) is None  # cannot bind on 2 cores
    assert quota_note(None, 2) is None
