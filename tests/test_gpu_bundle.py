"""benchmarks/gpu_check.sh on a machine with torch and nothing else, from the `make gpu-bundle` bundle.

The fast tests drive the script's interpreter search and dependency messages with a
stand-in ``torch`` module. The slow test is the rehearsal CI runs: build the bundle,
unpack it, and run it with a fresh venv that has only torch (the CPU wheel): every CUDA
experiment's CPU fallback and the fingerprint must run end to end from the bundle's
wheels, with no network and nothing else installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.contract.schemas import validate_file
from harness.images.locks import REPO_ROOT
from tests.conftest import require_or_skip

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.sh"
BUNDLE_LIMIT_BYTES = 60 * 1000 * 1000
EXPERIMENT_STEPS = ("attention", "dispatch", "budget", "budget-capped", "proposal", "overlap")
GPU_LIMIT_S = 7 * 60


def _fake_python(tmp_path: Path, cuda: bool = False) -> Path:
    """A python3 that has a `torch` (a stand-in) and no site-packages at all."""
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "__version__ = '0.0+stand-in'\n"
        f"class cuda:\n    @staticmethod\n    def is_available():\n        return {cuda}\n")
    exe = tmp_path / "python-with-torch"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={pkg.parent} exec {sys.base_prefix}/bin/python3 -S \"$@\"\n")
    exe.chmod(0o755)
    return exe


def _gpu_check(tmp_path: Path, py: str | None, **env: str) -> subprocess.CompletedProcess:
    """The script from a tree of its own (no .venv beside it), with only /usr/bin and /bin on PATH."""
    tree = tmp_path / "tree" / "benchmarks"
    tree.mkdir(parents=True, exist_ok=True)
    for name in ("gpu_check.sh", "bundle_python.py", "gpu_probe.py"):
        (tree / name).write_text((SCRIPT.parent / name).read_text())
    full = {k: v for k, v in os.environ.items() if k not in ("PY", "DEVICE")}
    full.update(env)
    if py:
        full["PY"] = py
    full["PATH"] = "/usr/bin:/bin"
    return subprocess.run(["bash", str(tree / "gpu_check.sh"), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300, env=full, cwd=tmp_path)


def test_no_python_with_torch_is_exit_4_naming_what_was_tried(tmp_path: Path):
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("the system python3 has torch, which the script would find")
    proc = _gpu_check(tmp_path, "/nonexistent/python")
    assert proc.returncode == 4, proc.stderr
    assert "no Python with torch found" in proc.stderr and "/nonexistent/python (not found)" in proc.stderr


def test_missing_dependencies_are_named_with_the_way_to_get_them(tmp_path: Path):
    proc = _gpu_check(tmp_path, str(_fake_python(tmp_path)))
    assert proc.returncode == 5, proc.stderr
    assert "cannot import: jsonschema (ModuleNotFoundError" in proc.stderr and "pynvml" in proc.stderr
    assert "make gpu-bundle" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def _limits(script: str) -> dict[str, int]:
    """Every limit the GPU path of the check runs under: the L_* checks and each CUDA step."""
    checks = {k: int(v) for k, v in re.findall(r"\b(L_[A-Z]+)=(\d+)", script)}
    gpu = script.rsplit('if [ "$DEVICE" = cuda ]; then', 1)[1].split("\nelse\n", 1)[0]
    return {**checks, **{label: int(limit) for limit, label in re.findall(r"^\s*cuda (\d+) ([\w-]+) ", gpu, re.M)}}


def test_the_gpu_step_limits_sum_to_at_most_seven_minutes():
    limits = _limits(SCRIPT.read_text())
    assert set(EXPERIMENT_STEPS) <= set(limits) and "L_PROBE" in limits
    total = sum(limits.values()) + limits["L_IMPORTS"]  # the import check runs before and after the install
    assert total <= GPU_LIMIT_S, limits  # the old script's limits summed to 540 s


def test_wheel_tags_are_checked_against_the_interpreter():
    sys.path.insert(0, str(SCRIPT.parent))
    import bundle_python

    assert bundle_python.wheel_fits("cffi-2.1.1-cp311-cp311-manylinux2014_x86_64.whl", (3, 11))
    assert not bundle_python.wheel_fits("cffi-2.1.1-cp311-cp311-manylinux2014_x86_64.whl", (3, 12))
    assert bundle_python.wheel_fits("cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl", (3, 12))
    assert bundle_python.wheel_fits("jsonschema-4.26.0-py3-none-any.whl", (3, 12))


def test_a_site_for_another_python_or_a_changed_file_is_refused(tmp_path: Path):
    sys.path.insert(0, str(SCRIPT.parent))
    import bundle_python

    lock = tmp_path / "x.lock"
    here = "{}.{}".format(*sys.version_info[:2])
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / bundle_python.SUMS).write_text(f"{bundle_python.sha256(site / 'pkg' / '__init__.py')}  pkg/__init__.py\n")
    lock.write_text("# Target: CPython 3.99, glibc 2.28 x86_64; wheels only.\n")
    assert bundle_python.verify(lock, site) == 5  # the lock's CPython is not this one
    lock.write_text(f"# Target: CPython {here}, glibc 2.28 x86_64; wheels only.\n")
    assert bundle_python.verify(lock, site) == 0
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"written by an earlier run")
    assert bundle_python.verify(lock, site) == 0  # bytecode from an earlier run is not a change
    (site / "pkg" / "__init__.py").write_text("x = 2\n")
    assert bundle_python.verify(lock, site) == 5


def test_imports_are_tried_for_real_not_found_by_spec(tmp_path: Path):
    """find_spec finds a package folder whose import fails (an extension for another Python): the check imports."""
    broken = tmp_path / "site" / "brokenpkg"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built for another CPython')\n")
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "bundle_python.py"), "imports", str(tmp_path / "site"),
                           "json", "brokenpkg"], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "brokenpkg (ImportError: built for another CPython)"


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory) -> Path:
    """A fresh venv holding torch 2.13.0 (CPU) and its own dependencies, nothing else."""
    venv = tmp_path_factory.mktemp("torch-only") / "venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(venv)], check=True, timeout=300)
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "torch==2.13.0"], capture_output=True,
                          text=True, timeout=1200)
    if proc.returncode != 0:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"cannot install torch into a clean venv: {proc.stderr[-400:]}")
    return venv / "bin" / "python"


@pytest.mark.slow
@pytest.mark.serverless
@pytest.mark.timeout(1800)
def test_bundle_rehearsal_runs_every_cpu_fallback_with_only_torch(tmp_path: Path, torch_only_python: Path):
    bundle = tmp_path / "infkit-gpu-check.tar.gz"
    built = subprocess.run([str(REPO_ROOT / "benchmarks" / "make_gpu_bundle.sh"), str(bundle)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=1200,
                           env={**os.environ, "PY": str(REPO_ROOT / ".venv" / "bin" / "python")})
    if built.returncode != 0 and "could not fetch" in built.stderr:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"pip cannot fetch the bundle's wheels here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert bundle.stat().st_size < BUNDLE_LIMIT_BYTES
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    root = tmp_path / "unpacked" / "infkit-gpu-check"
    assert (root / "BUNDLE").is_file() and not (root / ".venv").exists()
    out = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFKIT_", "PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(["bash", str(root / "benchmarks" / "gpu_check.sh"), str(out)], capture_output=True, text=True,
                          timeout=1500, env={**env, "PY": str(torch_only_python), "DEVICE": "cpu"}, cwd=tmp_path)
    status = (out / "status.txt").read_text() if (out / "status.txt").exists() else ""
    assert proc.returncode == 0, status + proc.stdout[-3000:] + proc.stderr[-3000:]
    # one archive and one status file are the only outputs
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.tar.gz", "status.txt"]
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        tar.extractall(out / "unpacked", filter="data")
    out = out / "unpacked"
    # every step ran, passed and ran on the CPU
    steps = {line.split()[0]: line for line in status.splitlines()}
    assert set(steps) == {"probe", "fingerprint", *EXPERIMENT_STEPS}
    probe = json.loads((out / "probe.json").read_text())
    assert probe["python"] and probe["against_pins"]["transformers"]["pinned"] == "4.57.1"
    assert probe["found"]["transformers"] and all(probe["assisted_generation_fields"].values())  # from the site
    assert all(" rc=0 " in line and line.endswith("device=cpu") for line in steps.values()), status
    assert validate_file(out / "fingerprint.json") == []
    assert json.loads((out / "fingerprint.json").read_text())["schema"] == "infkit/fingerprint/v1"
    results = sorted((out / "runs").glob("*/*/result.json"))
    assert {p.parent.parent.name for p in results} == {"attention", "dispatch", "budget", "proposal", "overlap"}
    for result in results:
        assert validate_file(result) == [], result
        assert json.loads(result.read_text())["details"]["device"] == "cpu"
    # runs come back unsigned (the borrowed machine holds no key) and are signed where they land
    assert not (out / "manifests").exists()
    run_dir = results[0].parent
    keys = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}  # a throwaway key, trusted where it is made
    keys.pop("INFKIT_SIGNING_KEY", None)
    keys.pop("INFKIT_SIGNING_KEY_PEM", None)
    signed = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "infkit"), "sign", str(run_dir), "--root", str(out)],
                            capture_output=True, text=True, timeout=120, cwd=out, env=keys)
    assert signed.returncode == 0, signed.stderr
    audited = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "infkit"), "audit", signed.stdout.strip(),
                              "--root", str(out)], capture_output=True, text=True, timeout=120, cwd=out, env=keys)
    assert audited.returncode == 0 and "VALID" in audited.stdout, audited.stdout + audited.stderr
    # the bundle's packages came from its own site for this CPython, not from the venv; both CPythons ship
    assert (root / "sites" / "py{}.{}".format(*sys.version_info[:2]) / "jsonschema").is_dir()
    assert {p.name for p in (root / "sites").iterdir()} == {"py3.11", "py3.12"}
    assert not list(torch_only_python.parent.parent.glob("lib/python*/site-packages/jsonschema"))
    # and without a GPU, the real check says so and stops
    gpu = subprocess.run(["bash", str(root / "benchmarks" / "gpu_check.sh"), str(tmp_path / "gpu")],
                         capture_output=True, text=True, timeout=300, env={**env, "PY": str(torch_only_python)})
    assert gpu.returncode == 3 and "sees no CUDA device" in gpu.stderr
