"""Workloads: generators per kind, arrival processes, exact token counts, canonical files.

Data flows one way: ``make_workload`` → ``write_workload`` (canonical JSONL) →
``load_workload`` (validated, id re-checked) → the client.
"""

from harness.workload import natural, sessions, traces  # noqa: F401  (registers the natural, trace and session kinds)
from harness.workload.arrival import PROCESSES, Arrival
from harness.workload.generators import (
    GENERATORS,
    HIGH_PRIORITY,
    NORMAL_PRIORITY,
    Common,
    Option,
    check_options,
    make_workload,
    register_generator,
)
from harness.workload.model import (
    Request,
    Workload,
    canonical_bytes,
    compute_workload_id,
    load_workload,
    write_workload,
)
from harness.workload.tokens import ExactTokenizer

__all__ = [
    "GENERATORS",
    "HIGH_PRIORITY",
    "NORMAL_PRIORITY",
    "PROCESSES",
    "Arrival",
    "Common",
    "ExactTokenizer",
    "Option",
    "Request",
    "Workload",
    "canonical_bytes",
    "check_options",
    "compute_workload_id",
    "load_workload",
    "make_workload",
    "register_generator",
    "write_workload",
]
