"""Real workload files (schema-valid, true workload_id) for the simulator tests, without a tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.workload import Request, write_workload
from harness.workload.model import finish_workload


def write_workload_file(path: Path, rows: list[dict[str, Any]], *, kind: str, arrival: dict[str, Any],
                        seed: int = 0) -> str:
    """Write ``rows`` (index, offset_s, input/output tokens, optional group/prefix_tokens) and return the id."""
    requests = [Request(prompt="x", **row) for row in rows]
    header = {"kind": kind, "generator": {"version": "test"}, "arrival": arrival,
              "seeds": {"lengths": seed, "content": seed + 1, "arrival": seed + 2},
              "tokenizer": {"name": "none", "sha256": "sha256:" + "0" * 64}, "paired_with": None}
    workload = finish_workload(header, requests)
    write_workload(path, workload)
    return workload.workload_id
