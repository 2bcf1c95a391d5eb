"""Output paths infkit can never write: a one-line error before any work, nothing left behind.

Every command that takes an output path checks it with harness/contract/paths.py first: a path
that is a directory, sits under a file, has an over-long component, or lies where no file can be
created (``/proc``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit

EXAMPLES = Path(__file__).parent / "examples" / "valid"
LONG = "x" * 300


def _bad_file_targets(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """case -> (path, text of the error)."""
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    return {
        "a-directory": (str(tmp_path / "a-dir"), "is a directory; give a file name"),
        "under-a-file": (str(tmp_path / "a-file" / "out.json"), "a-file is a file, not a folder"),
        "over-long-component": (str(tmp_path / f"{LONG}.json"), "is 305 bytes, longer than the file system's limit"),
        "not-creatable": ("/proc/infkit-test/out.json", "cannot create files in /proc"),
        "empty": ("", "an empty path"),
    }


CASES = ("a-directory", "under-a-file", "over-long-component", "not-creatable", "empty")


@pytest.mark.parametrize("case", CASES)
def test_workload_make_checks_its_output_before_the_tokenizer(tmp_path, case):
    target, expected = _bad_file_targets(tmp_path)[case]
    # The tokenizer does not exist: the output path must be refused before it is looked for.
    proc = infkit("workload", "make", "random", "--requests", "2", "--arrival", "closed", "--concurrency", "1",
                  "--tokenizer", str(tmp_path / "no-tokenizer"), "-o", target)
    assert_clean_error(proc, "-o/--out", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-file"]


@pytest.mark.parametrize("case", ("under-a-file", "over-long-component", "not-creatable", "empty"))
def test_run_checks_its_run_directory_before_any_request(tmp_path, case):
    target, expected = _bad_file_targets(tmp_path)[case]
    proc = infkit("run", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--workload",
                  str(EXAMPLES / "workload-header.jsonl"), "--out", target)
    assert_clean_error(proc, "--out", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-file"]


def test_run_refuses_an_existing_file_as_its_run_directory(tmp_path):
    (tmp_path / "taken").write_text("x")
    proc = infkit("run", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--workload",
                  str(EXAMPLES / "workload-header.jsonl"), "--out", str(tmp_path / "taken"))
    assert_clean_error(proc, "--out", "exists and is not a directory")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A signable run directory (run.json + fingerprint.json) under tmp_path/repo."""
    from manifest.manifest_helpers import make_run

    return make_run(tmp_path / "repo").run_dir


@pytest.mark.parametrize("case", ("a-directory", "under-a-file", "over-long-component", "not-creatable"))
def test_sign_checks_its_manifest_path_before_signing(tmp_path, run_dir, case):
    target, expected = _bad_file_targets(tmp_path)[case]
    config = tmp_path / "config"
    proc = infkit("sign", str(run_dir), "--root", str(tmp_path / "repo"), "--out", target,
                  env={"XDG_CONFIG_HOME": str(config), "INFKIT_SIGNING_KEY": ""})
    assert_clean_error(proc, "--out", expected)
    assert_nothing_left(config, tmp_path / "repo" / "manifests")


@pytest.mark.parametrize("case", ("a-directory", "under-a-file"))
def test_fingerprint_checks_its_output_before_collecting(tmp_path, case):
    target, expected = _bad_file_targets(tmp_path)[case]
    assert_clean_error(infkit("fingerprint", "-o", target), "-o/--out", expected)


@pytest.mark.parametrize("case", ("a-directory", "under-a-file", "over-long-component"))
def test_keys_init_checks_the_private_key_path(tmp_path, case):
    target, expected = _bad_file_targets(tmp_path)[case]
    proc = infkit("keys", "init", "--root", str(tmp_path / "repo"), env={"INFKIT_SIGNING_KEY": target})
    assert_clean_error(proc, "private key", expected)
    assert_nothing_left(tmp_path / "repo")


def test_keys_trust_checks_the_policy_path(tmp_path):
    target, expected = _bad_file_targets(tmp_path)["under-a-file"]
    pem = tmp_path / "k.pub.pem"
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from harness.manifest.keys import public_pem

    pem.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    assert_clean_error(infkit("keys", "trust", target, "--public-key", str(pem)), "trust policy", expected)
