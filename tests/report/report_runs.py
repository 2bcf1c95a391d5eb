"""Real run directories for the report tests, and variants derived from them (re-signed).

Runs are made by the real CLI (``python -m harness mech ...``, ``bench 69``) under one root
and signed with a test key outside the repository. A derived variant is a copy of a signed
run with one change (a package version, a workload id, a headline figure), signed again with
the same key, so it audits VALID and differs exactly where the test says.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.manifest import sign_run

REPO = Path(__file__).resolve().parents[2]
Mutation = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Root:
    """A repository-like root (runs/, manifests/) and the signing key used for it."""

    path: Path
    key: Path

    @property
    def policy(self) -> Path:
        """The local trust policy `keys init` adds the root's key to (never the user's own)."""
        return self.key.parent / "trust.json"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "INFKIT_SIGNING_KEY": str(self.key), "INFKIT_TRUST_POLICY": str(self.policy),
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}

    def infkit(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=self.path, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)


@dataclass(frozen=True)
class SignedRun:
    run_dir: Path
    manifest: Path

    def run_json(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "run.json").read_text())


def make_root(path: Path) -> Root:
    root = Root(path, path.parent / f"{path.name}-keys" / "signing.pem")
    proc = root.infkit("keys", "init")
    assert proc.returncode == 0, proc.stderr
    return root


def sign(root: Root, run_dir: Path) -> SignedRun:
    return SignedRun(run_dir, sign_run(run_dir, root=root.path, key_path=root.key))


def run_mech(root: Root, name: str) -> SignedRun:
    """A real mechanism run, signed by the run itself when it ends (with the root's key)."""
    proc = root.infkit("mech", name, "--quiet")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines() if ": " in line)
    return SignedRun((root.path / lines["result"]).parent, root.path / lines["manifest"])


def _edit(path: Path, mutate: Mutation | None) -> None:
    if mutate:
        doc = json.loads(path.read_text())
        mutate(doc)
        path.write_text(json.dumps(doc, indent=2))


def derive(root: Root, source: SignedRun, suffix: str, *, run: Mutation | None = None,
           fingerprint: Mutation | None = None, result: Mutation | None = None,
           result_file: str = "result.json") -> SignedRun:
    """Copy ``source`` to run id ``<source run id>-<suffix>``, apply the mutations, sign it."""
    run_id = f"{source.run_dir.name}-{suffix}"
    target = source.run_dir.with_name(run_id)
    shutil.copytree(source.run_dir, target)

    def rename(doc: dict[str, Any]) -> None:
        doc["run_id"] = run_id
        if run:
            run(doc)

    _edit(target / "run.json", rename)
    _edit(target / "fingerprint.json", fingerprint)
    _edit(target / result_file, result)
    return sign(root, target)


def tamper_manifest(manifest: Path, change: Mutation) -> None:
    """Edit the signed statement in place without signing it again (the signature no longer matches)."""
    envelope = json.loads(manifest.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    change(statement)
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    manifest.write_text(json.dumps(envelope))
