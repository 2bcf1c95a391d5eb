"""Role images without an engine: hadolint, digest pins, locks against their files, dependency locks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.contract.schemas import validate_document
from harness.errors import CapabilityMissing, InvalidInput
from harness.images import deplock
from harness.images.build import BuildConfig, build_argv, pin_dockerfile_base
from harness.images.dockerfile import hadolint, parse, pin_problems
from harness.images.driver import check_driver
from harness.images.locks import REPO_ROOT, ImageLock, load_lock, lock_problems, roles

ROLES = ["comm-parallel", "inf-cpu", "inf-cuda-mechanism", "inf-vllm-011-cu128", "inf-vllm-cpu", "sglang"]
DOCKERFILES = sorted((REPO_ROOT / "docker").glob("*/Dockerfile"))
DIGEST = "sha256:" + "ab" * 32


def test_every_role_has_a_dockerfile_and_a_lock():
    assert roles() == ROLES
    assert [p.parent.name for p in DOCKERFILES] == ROLES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_passes(dockerfile: Path):
    assert hadolint(dockerfile, REPO_ROOT / ".hadolint.yaml") == []


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_from_is_digest_pinned(dockerfile: Path):
    assert pin_problems(dockerfile) == []


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_practices(dockerfile: Path):
    text = dockerfile.read_text()
    assert "USER 10001:10001" in text  # non-root (created by docker/common/provision.sh)
    for label in ("source", "revision", "created", "base.name", "base.digest"):
        assert f"org.opencontainers.image.{label}=" in text
    assert "COPY harness" not in text and "ADD " not in text  # the harness is mounted, never copied
    assert "/opt/infkit-image/provision.sh /opt/infkit-image/requirements.lock" in text  # --require-hashes
    assert "--mount=type=secret,id=cabundle" in text and "ca-certificates.crt" not in text  # CA only as a build secret
    lock = next(load_lock(r) for r in ROLES if load_lock(r).dockerfile == dockerfile)
    assert ("HEALTHCHECK" in text) == (lock.server is not None)


def test_provisioning_installs_only_hash_locked_wheels():
    script = (REPO_ROOT / "docker/common/provision.sh").read_text()
    assert "--require-hashes" in script and "--no-deps" in script and "--only-binary=:all:" in script
    assert "PIP_CERT=/run/secrets/cabundle" in script


def test_unpinned_from_fails_the_check(tmp_path: Path):
    cases = {
        "tag": "FROM python:3.11-slim\n",
        "arg-default-unpinned": "ARG BASE_IMAGE=debian:bookworm-slim\nFROM ${BASE_IMAGE}\n",
        "arg-without-default": "ARG BASE_IMAGE\nFROM $BASE_IMAGE\n",
        "short-digest": "FROM debian@sha256:abc\n",
        "second-stage": f"FROM debian@{DIGEST} AS build\nFROM python:3.11\nCOPY --from=build /x /x\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        problems = pin_problems(path)
        assert len(problems) == 1 and "not pinned by digest" in problems[0], name


def test_pinned_forms_pass(tmp_path: Path):
    path = tmp_path / "Dockerfile"
    path.write_text(
        "# syntax=docker/dockerfile:1.7\n"
        f"ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim@{DIGEST}\n"
        "FROM --platform=linux/amd64 ${BASE_IMAGE} AS base\n"
        "RUN true \\\n  && true\n"
        "FROM base\n"
    )
    assert pin_problems(path) == []
    args, froms = parse(path.read_text())
    assert args["BASE_IMAGE"].endswith(DIGEST)
    assert [f.stage for f in froms] == ["base", None]


def test_hadolint_reports_findings(tmp_path: Path):
    path = tmp_path / "Dockerfile"
    path.write_text(f"FROM debian@{DIGEST}\nRUN cd /tmp && echo hi\n")  # DL3003: use WORKDIR
    assert any("DL3003" in line for line in hadolint(path))


@pytest.mark.parametrize("role", ROLES)
def test_lock_validates_and_matches_its_files(role: str):
    lock = load_lock(role)
    assert validate_document(lock.doc) == []
    assert lock_problems(lock) == []


def test_locks_state_unverified_digests_honestly():
    for role in ROLES:
        base = load_lock(role).doc["base"]
        if not base["digest_verified"]:
            assert (
                "not resolved against the registry" in base["digest_source"] or "PLACEHOLDER" in base["digest_source"]
            )
    assert load_lock("sglang").base_placeholder


def test_cuda_roles_record_their_driver_floor():
    assert load_lock("inf-vllm-011-cu128").cuda.min_driver == "570.26"
    assert load_lock("inf-vllm-011-cu128").base_image.startswith("docker.io/vllm/vllm-openai:v0.11.0@sha256:")
    assert load_lock("inf-cpu").cuda is None


def test_lock_drift_is_detected(tmp_path: Path):
    root = tmp_path / "repo"
    for rel in ("docker/inf-cpu/Dockerfile", "requirements/inf-cpu.lock"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, root / rel)
    lock = load_lock("inf-cpu")
    assert lock_problems(lock, root) == []
    with open(root / "requirements/inf-cpu.lock", "a") as f:
        f.write("extra==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    problems = lock_problems(lock, root)
    assert any("changed since the lock was written" in p for p in problems)
    count = len(deplock.parse_lock((REPO_ROOT / "requirements/inf-cpu.lock").read_text()))
    assert any(f"has {count + 1} distributions" in p for p in problems)
    pin_dockerfile_base(root / "docker/inf-cpu/Dockerfile", "docker.io/library/debian:bookworm-slim", DIGEST)
    assert any("differs from the Dockerfile" in p for p in lock_problems(lock, root))


def test_lock_without_digest_refuses_pull():
    with pytest.raises(CapabilityMissing, match="no image digest yet"):
        load_lock("inf-cpu").pull_ref()
    doc = json.loads(json.dumps(load_lock("inf-cpu").doc))
    doc["image"]["digest"] = DIGEST
    assert ImageLock("inf-cpu", Path("x"), doc).pull_ref() == f"ghcr.io/infkit/inf-cpu@{DIGEST}"


def test_unknown_role_is_a_user_error():
    with pytest.raises(InvalidInput, match="unknown environment role"):
        load_lock("inf-nope")


def test_build_argv_records_a_base_substitution():
    lock = load_lock("inf-cpu")
    argv = build_argv(
        lock, BuildConfig("inf-cpu", base_image="localhost/base:1", ca_bundle=Path("/ca.pem")), "podman", DIGEST
    )
    assert argv[:2] == ["podman", "build"] and "--format" in argv
    assert "--secret" in argv and "id=cabundle,src=/ca.pem" in argv
    assert "BASE_IMAGE=localhost/base:1" in argv and f"BASE_DIGEST={DIGEST}" in argv
    assert f"BASE_SUBSTITUTED_FOR={lock.base_image}" in argv
    plain = build_argv(lock, BuildConfig("inf-cpu", ca_bundle=Path("/ca.pem")), "docker", None)
    assert f"BASE_IMAGE={lock.base_image}" in plain and "BASE_SUBSTITUTED_FOR=" in plain


def test_dependency_locks_are_hash_locked():
    for path in sorted((REPO_ROOT / "requirements").glob("*.lock")):
        dists = deplock.parse_lock(path.read_text())
        assert dists, path
        assert len({d.name for d in dists}) == len(dists), path
        assert all(len(d.sha256) == 64 for d in dists)
    cuda = {d.name for d in deplock.parse_lock((REPO_ROOT / "requirements/inf-cuda-mechanism.lock").read_text())}
    assert "torch" not in cuda and "transformers" in cuda and "nvidia-ml-py" in cuda


def test_dists_from_pip_report_excludes_base_packages():
    def item(name, version, digest):
        return {
            "metadata": {"name": name, "version": version},
            "download_info": {"url": f"https://x/{name}.whl", "archive_info": {"hashes": {"sha256": digest}}},
        }

    report = {
        "install": [
            item("Torch", "2.8.0", "1" * 64),
            item("nvidia-nccl-cu12", "2.27", "2" * 64),
            item("nvidia-ml-py", "13.0", "3" * 64),
            item("Jinja2", "3.1", "4" * 64),
        ]
    }
    dists = deplock.dists_from_report(report, ("torch", "nvidia-*-cu12"))
    assert [(d.name, d.version) for d in dists] == [("jinja2", "3.1"), ("nvidia-ml-py", "13.0")]
    text = deplock.render_lock(dists, "requirements/x.in", deplock.LockTarget(exclude=("torch",)))
    assert deplock.parse_lock(text) == dists


def test_manylinux_tags_cover_older_glibc():
    tags = deplock.manylinux_tags("2.35", "x86_64")
    assert tags[0] == "manylinux_2_35_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and "manylinux_2_36_x86_64" not in tags


def test_driver_rule_follows_nvidia_compatibility_terms():
    full = check_driver("12.8", "570.26", driver_version="570.86.15")
    assert (full.mechanism, full.warning) == ("full", None)
    assert check_driver("12.9", "575.51.03", driver_version="580.65.06").mechanism == "full"
    # R525..R570 runs a 12.8 userspace through minor-version compatibility: it passes, saying what is lost
    minor = check_driver("12.8", "570.26", driver_version="535.104.05")
    assert minor.mechanism == "minor_version_compatibility"
    assert "no PTX JIT" in minor.warning and "R570" in minor.warning and "R525" in minor.warning
    assert check_driver("12.9", "575.51.03", driver_version="570.86.15").mechanism == "minor_version_compatibility"
    assert check_driver("12.8", "570.26", driver_version="525.60.13").mechanism == "minor_version_compatibility"
    # below the 12.x floor only the forward-compatibility package runs it, and only when it is declared
    with pytest.raises(CapabilityMissing, match=r"525\.60\.11 is older than 525\.60\.13.*R525\+.*R570\+"):
        check_driver("12.8", "570.26", driver_version="525.60.11")
    with pytest.raises(CapabilityMissing, match=r"470\.239\.06 is older than 525\.60\.13"):
        check_driver("12.8", "570.26", driver_version="470.239.06")
    fc = check_driver("12.8", "570.26", driver_version="470.239.06", allow_forward_compat=True)
    assert fc.mechanism == "forward_compatibility" and "forward-compatibility package" in fc.warning


def test_refresh_and_base_resolution_keep_the_lock_valid(tmp_path: Path):
    from harness.images.locks import refreshed, with_base_digest, with_registry_ref, write_lock

    lock = load_lock("inf-cpu")
    pushed = with_registry_ref(
        refreshed(lock, image_digest=DIGEST, built_utc="2026-01-01T00:00:00Z", revision="abc"),
        "ghcr.io/someone/inf-cpu",
    )
    assert pushed.pull_ref() == f"ghcr.io/someone/inf-cpu@{DIGEST}"
    assert lock.digest is None  # the original is untouched
    out = write_lock(type(pushed)(pushed.role, tmp_path / "inf-cpu.lock.json", pushed.doc))
    assert validate_document(json.loads(out.read_text())) == []

    resolved = with_base_digest(lock, DIGEST, "resolved against the registry")
    assert resolved.doc["base"]["digest_verified"] and resolved.base_image.endswith(DIGEST)
    root = tmp_path / "repo"
    for rel in ("docker/inf-cpu/Dockerfile", "requirements/inf-cpu.lock"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, root / rel)
    assert any("differs from the Dockerfile" in p for p in lock_problems(resolved, root))
    pin_dockerfile_base(root / "docker/inf-cpu/Dockerfile", resolved.doc["base"]["name"], DIGEST)
    assert lock_problems(resolved, root) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["images", "build", "inf-nope"], "unknown environment role 'inf-nope'"),
        (["images", "pull", "inf-cpu"], "has no image digest yet"),
        (["images", "build", "sglang"], "placeholder base digest"),
        (["images", "lock", "inf-cpu", "--digest", "sha256:xyz"], "is not sha256:<64 hex>"),
        (["images", "run", "--run-dir", "/tmp", "inf-cpu"], "no infkit arguments to run"),
    ],
)
def test_cli_bad_input_is_one_line(argv, message, capsys):
    from harness.cli import main

    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_check_and_list(capsys):
    from harness.cli import main

    assert main(["images", "check"]) == 0
    assert capsys.readouterr().out.count(": ok") == len(ROLES)
    assert main(["images", "list"]) == 0
    assert "CUDA 12.8 / driver >= 570.26" in capsys.readouterr().out


def test_wheelhouse_is_fetched_for_the_lock_target_and_checked_against_its_hashes(tmp_path: Path):
    from harness.images import wheelhouse

    lock_file = REPO_ROOT / "requirements" / "inf-vllm-cpu.lock"
    target = wheelhouse.lock_target(lock_file)
    assert (target.python_version, target.glibc, target.arch) == ("3.11", "2.36", "x86_64")
    argv = wheelhouse.download_argv(lock_file, tmp_path, target)
    assert argv[1:4] == ["-m", "pip", "download"]
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:"):
        assert flag in argv
    assert argv[argv.index("--python-version") + 1] == "3.11" and "manylinux_2_36_x86_64" in argv
    # a folder is checked file by file against the lock's sha256, not by name
    (tmp_path / "tabulate-0.10.0-py3-none-any.whl").write_bytes(b"not the locked file")
    missing = wheelhouse.missing_wheels(lock_file, tmp_path)
    assert "tabulate==0.10.0" in missing and len(missing) == 161
    bundle = wheelhouse.lock_target(REPO_ROOT / "requirements" / "gpu-bundle.lock")
    assert (bundle.python_version, bundle.glibc) == ("3.11", "2.28")


def test_a_wheelhouse_reaches_the_build_as_a_named_context(tmp_path: Path):
    from harness.images.build import BuildConfig, build_argv, takes_wheelhouse

    vllm_cpu = load_lock("inf-vllm-cpu")
    assert takes_wheelhouse(vllm_cpu) and not takes_wheelhouse(load_lock("inf-cpu"))
    argv = build_argv(vllm_cpu, BuildConfig(role="inf-vllm-cpu"), "podman", None, wheelhouse=tmp_path)
    assert argv[argv.index("--build-context") + 1] == f"wheelhouse={tmp_path}"
    assert "--build-context" not in build_argv(vllm_cpu, BuildConfig(role="inf-vllm-cpu"), "podman", None)
    with pytest.raises(InvalidInput, match="neither auto, off nor a folder"):
        BuildConfig(role="inf-vllm-cpu", wheelhouse=str(tmp_path / "nope")).check()
    BuildConfig(role="inf-vllm-cpu", wheelhouse=str(tmp_path)).check()


def test_bundle_python_installs_only_locked_wheels(tmp_path: Path):
    import hashlib
    import subprocess
    import sys
    import zipfile

    wheels, site = tmp_path / "wheels", tmp_path / ".site"
    wheels.mkdir()
    good = wheels / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("pkg/__init__.py", "VALUE = 1\n")
        zf.writestr("pkg-1.0.data/purelib/pkg_extra.py", "X = 2\n")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    lock = tmp_path / "x.lock"
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"  # the lock names the interpreter its wheels are for
    lock.write_text(f"# Target: CPython {here}, any platform; wheels only.\npkg==1.0 \\\n    --hash=sha256:{digest}\n")
    tool = [
        sys.executable,
        str(REPO_ROOT / "benchmarks" / "bundle_python.py"),
        "install",
        str(lock),
        str(wheels),
        str(site),
    ]
    assert subprocess.run(tool, capture_output=True, text=True).returncode == 0
    assert (site / "pkg" / "__init__.py").is_file() and (site / "pkg_extra.py").is_file()
    assert not list(site.glob("*.data"))
    (wheels / "evil-1.0-py3-none-any.whl").write_bytes(b"PK not locked")
    refused = subprocess.run(tool, capture_output=True, text=True)
    assert refused.returncode == 5 and "is not in x.lock" in refused.stderr
