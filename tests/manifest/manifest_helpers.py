"""Helpers for the manifest tests: build a realistic run directory, audit it, re-sign statements."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.cli import main
from harness.manifest.dsse import sign_payload
from harness.manifest.keys import SigningKey, load_signing_key
from harness.manifest.predicate import statement_bytes
from harness.rundir.record import RunRecord, native_image, write_run_record

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "valid"
RUN_ID = "20261130T080000Z-abc123"
IMAGE_DIGEST = "sha256:" + "d" * 64
GIT_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Run:
    root: Path
    run_dir: Path
    manifest: Path | None = None

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def make_run(
    root: Path,
    *,
    decision: str = "inconclusive",
    evidence_level: str = "single",
    results: tuple[str, ...] = ("serving-single.json",),
    status: str = "completed",
) -> Run:
    """A realistic run directory: run.json, fingerprint, results, requests, log, a plot in a subfolder."""
    run_dir = root / "runs" / "69" / RUN_ID
    (run_dir / "plots").mkdir(parents=True)
    record = RunRecord(
        semantic_id="INF-PREFIX-CACHE", run_id=RUN_ID, run_label="shared-prefix/cache-on",
        requested={"concurrency": 2, "repeats": 3}, effective={"concurrency": 2, "repeats": 3},
        evidence_level=evidence_level, decision=decision, command=["infkit", "bench", "69"],
        images=[native_image("INF-CPU"), {"role": "INF-VLLM-011-CU128", "ref": "vllm/vllm-openai:v0.11.0",
                                           "digest": IMAGE_DIGEST}],
        model={"name": "SmolLM2-135M-Instruct", "version": "sha256:" + "b" * 64},
        tokenizer={"name": "SmolLM2-135M-Instruct", "version": "sha256:" + "c" * 64},
        ended_utc="2026-11-30T08:10:00.000Z", status=status,
    )
    write_run_record(run_dir, record)
    fingerprint = json.loads((EXAMPLES / "fingerprint-no-gpu.json").read_text())
    fingerprint["harness"].update(git_commit=GIT_COMMIT, git_dirty=True)  # the revision at run time
    (run_dir / "fingerprint.json").write_text(json.dumps(fingerprint, indent=2))
    for i, name in enumerate(results):
        shutil.copy(EXAMPLES / name, run_dir / ("result.json" if i == 0 else f"result-{i}.json"))
    (run_dir / "requests.jsonl").write_text("".join(json.dumps({"i": i, "ttft_ms": 10.0 + i}) + "\n" for i in range(8)))
    (run_dir / "server.log").write_text("INFO started\nINFO ready\n")
    (run_dir / "plots" / "ttft.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return Run(root, run_dir)


def audit(run: Run, *extra: str, manifest: Path | None = None) -> int:
    return main(["audit", str(manifest or run.manifest), "--root", str(run.root), *extra])


def audit_json(run: Run, capsys, *extra: str, manifest: Path | None = None) -> tuple[int, dict]:
    capsys.readouterr()
    rc = audit(run, "--json", *extra, manifest=manifest)
    return rc, json.loads(capsys.readouterr().out)


def reasons(doc: dict) -> list[tuple[str, str]]:
    return [(r["check"], r["message"]) for m in doc["manifests"] for r in m["reasons"]]


def read_statement(manifest: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(manifest.read_text())["payload"]))


def resign(manifest: Path, mutate: Callable[[dict], None], key: SigningKey | None = None) -> None:
    """Change the statement and sign it again properly (with the default key unless given)."""
    statement = read_statement(manifest)
    mutate(statement)
    envelope = sign_payload(statement_bytes(statement), key or load_signing_key())
    manifest.write_text(json.dumps(envelope))
