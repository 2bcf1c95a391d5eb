"""The result contract: schemas, typed result groups, evidence rules, atomic writes."""

from harness.contract.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from harness.contract.result import (
    Conclusion,
    Correctness,
    Effect,
    Environment,
    ExcludedWork,
    Failure,
    Identity,
    Performance,
    Result,
    WorkloadInfo,
    build_result,
    read_result,
    write_result,
)
from harness.contract.schemas import (
    SCHEMA_DIR,
    DocumentError,
    load_document,
    schema_for,
    validate_document,
    validate_file,
)

__all__ = [
    "SCHEMA_DIR",
    "Conclusion",
    "Correctness",
    "DocumentError",
    "Effect",
    "Environment",
    "ExcludedWork",
    "Failure",
    "Identity",
    "Performance",
    "Result",
    "WorkloadInfo",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "build_result",
    "load_document",
    "read_result",
    "schema_for",
    "validate_document",
    "validate_file",
    "write_result",
]
