"""The manifest predicate (schemas/manifest-predicate.schema.json) and the in-toto Statement.

The predicate is built from the run directory alone: ``run.json`` (what was
asked, what took effect, images, model, times, verdict) and
``fingerprint.json`` (host, GPU/driver, harness revision at run time).
"""

from __future__ import annotations

from typing import Any

from harness import __version__
from harness.contract.jsonio import dumps_bytes
from harness.contract.result import utc_now
from harness.ids import sha256_bytes
from harness.manifest.subjects import Subject

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://infkit.dev/manifest/v1"
PREDICATE_SCHEMA = "infkit/manifest-predicate/v1"
RUN_FIELDS = ("semantic_id", "run_id", "run_label", "workload_ids", "command", "requested", "effective",
              "images", "model", "tokenizer", "started_utc", "ended_utc", "evidence_level", "decision")


def fingerprint_summary(doc: dict[str, Any], name: str, raw: bytes) -> dict[str, Any]:
    """The GPU/driver part of the fingerprint, inline; the full document is a subject."""
    nvml = doc.get("nvml") or {}
    host = doc.get("host") or {}
    torch = doc.get("torch") or {}
    return {
        "path": name,
        "sha256": sha256_bytes(raw),
        "driver_version": nvml.get("driver_version"),
        "cuda_driver_version": nvml.get("cuda_driver_version"),
        "gpus": [
            {k: g.get(k) for k in ("index", "name", "uuid_sha256", "memory_total_bytes", "compute_capability",
                                   "vbios_version", "power_limit_w", "ecc_mode", "mig_mode")}
            for g in doc.get("gpus") or []
        ],
        "gpus_absent_reason": doc.get("gpus_absent_reason"),
        "host": {k: host.get(k) for k in ("os", "kernel", "machine", "cpu_model", "cpu_cores_logical",
                                          "memory_total_bytes")},
        "torch": torch.get("version"),
        "cuda": torch.get("cuda"),
    }


def build_predicate(
    run: dict[str, Any], fingerprint: dict[str, Any], fingerprint_name: str, fingerprint_raw: bytes, run_dir: str,
) -> dict[str, Any]:
    harness = fingerprint.get("harness") or {}
    predicate: dict[str, Any] = {"schema": PREDICATE_SCHEMA}
    predicate.update({k: run[k] for k in RUN_FIELDS})
    predicate.update(
        status=run.get("status", "completed"),
        run_dir=run_dir,
        harness={
            "version": harness.get("version", __version__),
            "git_commit": harness.get("git_commit"),
            "git_dirty": harness.get("git_dirty"),
        },
        fingerprint=fingerprint_summary(fingerprint, fingerprint_name, fingerprint_raw),
        signed_utc=utc_now(),
    )
    return predicate


def build_statement(subjects: list[Subject], predicate: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_dict() for s in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def statement_bytes(statement: dict[str, Any]) -> bytes:
    """Canonical-enough bytes to sign: sorted keys, no whitespace (the signature covers the bytes)."""
    return dumps_bytes(statement, "the manifest statement", sort_keys=True, separators=(",", ":"))
