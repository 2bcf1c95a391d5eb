"""run.json: the record at the top of every run directory (schemas/run.schema.json).

Experiments write it when they finish (or fail); ``infkit sign`` builds the
manifest predicate from it, so signing needs nothing but the run directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_json
from harness.contract.result import utc_now
from harness.contract.schemas import load_document, require_valid, validate_document
from harness.errors import SchemaViolation

RUN_FILE = "run.json"
RUN_SCHEMA = "infkit/run/v1"


@dataclass
class RunRecord:
    semantic_id: str
    run_id: str
    run_label: str
    requested: dict[str, Any]
    effective: dict[str, Any]
    evidence_level: str
    decision: str
    workload_ids: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    images: list[dict[str, Any]] = field(default_factory=list)
    model: dict[str, Any] | None = None
    tokenizer: dict[str, Any] | None = None
    started_utc: str = field(default_factory=utc_now)
    ended_utc: str | None = None
    status: str = "completed"
    outputs: dict[str, Any] | None = None  # {"result", "summary", "figures"}: what a reader opens first

    def to_dict(self) -> dict[str, Any]:
        doc = {"schema": RUN_SCHEMA, **asdict(self)}
        if doc["outputs"] is None:
            del doc["outputs"]
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> RunRecord:
        """A parsed run.json as the record that wrote it, after its schema check; ``where`` (the file) and the first
        broken field name what is wrong in one line."""
        doc = require_valid(doc, RUN_SCHEMA, where, "an infkit run record")
        return cls(**{k: v for k, v in doc.items() if k != "schema"})

    @property
    def model_version(self) -> str | None:
        return (self.model or {}).get("version")

    def output(self, name: str) -> str | None:
        """The file ``outputs`` names for ``name`` (result, summary), or None."""
        value = (self.outputs or {}).get(name)
        return value if isinstance(value, str) and value else None


def read_run_record(run_dir: str | os.PathLike) -> RunRecord:
    """A run directory's run.json; any bad file is one ``InvalidInput`` naming it and the field."""
    path = Path(run_dir) / RUN_FILE
    return RunRecord.from_dict(load_document(path), str(path))


CONTAINER_IMAGE_ENV = "INFKIT_CONTAINER_IMAGE"  # set by the docker runner inside a role image


def native_image(role: str, python_executable: str | None = None) -> dict[str, Any]:
    """The `images` entry of the environment a run executes in.

    Inside a role image the docker runner passes the image actually used (ref, digest, base
    substitution) in ``INFKIT_CONTAINER_IMAGE``; that is the entry. Otherwise the entry is the
    environment's package list digest, read from ``python_executable`` (e.g. the serving
    venv's python) when given, else from the current environment.
    """
    container = os.environ.get(CONTAINER_IMAGE_ENV)
    if container and not python_executable:
        return {**json.loads(container), "role": role}
    if python_executable:
        import subprocess

        out = subprocess.run(
            [
                python_executable,
                "-c",
                "import importlib.metadata as m;print('\\n'.join(sorted(f\"{d.metadata['Name'].lower()}=={d.version}\" "
                "for d in m.distributions())))",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        lines = sorted(set(out.split()))
        version = subprocess.run(
            [python_executable, "-c", "import platform;print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    else:
        lines = sorted({f"{d.metadata['Name'].lower()}=={d.version}" for d in md.distributions()})
        version = platform.python_version()
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"role": role, "native": True, "python": version, "packages_sha256": f"sha256:{digest}"}


def write_run_record(run_dir: str | Path, record: RunRecord) -> Path:
    doc = record.to_dict()
    problems = validate_document(doc)
    if problems:
        raise SchemaViolation("run.json does not satisfy its schema: " + "; ".join(map(str, problems)))
    return atomic_write_json(Path(run_dir) / RUN_FILE, doc)
