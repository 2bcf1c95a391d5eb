"""A run directory holds regular files: anything else is refused by sign and reported by audit.

Symlinks out of the root, to directories or dangling, and named pipes, sockets or devices are
never read; ``sign`` refuses them before writing anything, ``audit`` reports one it finds in a
signed run directory as an added entry. And a signing key named by ``$INFKIT_SIGNING_KEY``
must exist: only the default key is created on demand.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit
from manifest_helpers import audit_json, reasons


def _link_out(run_dir: Path) -> tuple[str, str]:
    os.symlink("/etc/hostname", run_dir / "evil")
    return "evil", "is a symlink to /etc/hostname, outside the root; not read"


def _link_dir(run_dir: Path) -> tuple[str, str]:
    os.symlink(run_dir / "plots", run_dir / "plots-again")
    return "plots-again", "is a symlink to a directory; not read"


def _dangling(run_dir: Path) -> tuple[str, str]:
    os.symlink(run_dir / "gone.json", run_dir / "dangling.json")
    return "dangling.json", "is a dangling symlink; not read"


def _fifo(run_dir: Path) -> tuple[str, str]:
    os.mkfifo(run_dir / "plots" / "pipe")
    return "plots/pipe", "is a named pipe; not read"


def _socket(run_dir: Path) -> tuple[str, str]:
    sock = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(run_dir)  # bound by a relative name: a worker's temporary path can exceed AF_UNIX's 108 bytes
    try:
        sock.bind("s")
    finally:
        os.chdir(here)
        sock.close()
    return "s", "is a socket; not read"


ENTRIES = {"link-out-of-root": _link_out, "link-to-directory": _link_dir, "dangling-link": _dangling,
           "named-pipe": _fifo, "socket": _socket}


@pytest.mark.parametrize("case", sorted(ENTRIES))
def test_audit_reports_an_entry_added_after_signing(signed_run, capsys, case):
    name, message = ENTRIES[case](signed_run.run_dir)
    rc, doc = audit_json(signed_run, capsys)
    assert rc == 1 and doc["manifests"][0]["verdict"] == "INVALID"
    expected = f"added: {signed_run.rel(signed_run.run_dir)}/{name} {message}"
    assert ("unlisted-file", expected) in reasons(doc), reasons(doc)


def test_audit_in_a_subprocess_prints_no_traceback(signed_run):
    _link_out(signed_run.run_dir)
    _fifo(signed_run.run_dir)
    proc = infkit("audit", str(signed_run.manifest), "--root", str(signed_run.root))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "INVALID (2 reasons)" in proc.stdout and "outside the root; not read" in proc.stdout


@pytest.fixture
def unsigned(tmp_path, key_home):
    from manifest_helpers import make_run

    return make_run(tmp_path / "repo"), key_home


@pytest.mark.parametrize("case", sorted(ENTRIES))
def test_sign_refuses_the_entry_before_writing_anything(unsigned, case):
    run, key_home = unsigned
    name, message = ENTRIES[case](run.run_dir)
    proc = infkit("sign", str(run.run_dir), "--root", str(run.root), env={"XDG_CONFIG_HOME": str(key_home)})
    assert_clean_error(proc, f"cannot sign: {run.run_dir / name} {message.removesuffix('; not read')}")
    assert_nothing_left(run.root / "manifests", key_home / "infkit")


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_named_signing_key_must_exist(unsigned, tmp_path, how):
    run, key_home = unsigned
    missing = tmp_path / "missing.pem"
    env = {"XDG_CONFIG_HOME": str(key_home), "INFKIT_SIGNING_KEY": str(missing) if how == "env" else ""}
    args = ["--key", str(missing)] if how == "flag" else []
    proc = infkit("sign", str(run.run_dir), "--root", str(run.root), *args, env=env)
    assert_clean_error(proc, f"private key {missing}", "no such file")
    assert_nothing_left(missing, run.root / "manifests", key_home / "infkit")


def test_the_default_key_is_still_created_on_first_use(unsigned):
    run, key_home = unsigned
    proc = infkit("sign", str(run.run_dir), "--root", str(run.root),
                  env={"XDG_CONFIG_HOME": str(key_home), "INFKIT_SIGNING_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert (key_home / "infkit" / "keys" / "signing-ed25519.pem").is_file()
