"""Workload files: frozen request records, canonical bytes, ``workload_id``, load and write.

A workload file is JSON Lines: line 1 is the header (``schemas/workload.schema.json``),
then one request per line (its ``$defs/request``). Canonical form, the only form infkit
writes: each line is ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` followed by ``\\n``, UTF-8.

``workload_id`` = ``"sha256:" + sha256(canonical bytes of the whole file with the header's
workload_id set to "")``. Same parameters therefore give byte-identical files and the
same id on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_bytes
from harness.contract.distribution import token_summary
from harness.contract.schemas import (
    Problem,
    iter_jsonl,
    register_file_check,
    validate_document,
    validate_file,
)
from harness.errors import InvalidInput
from harness.ids import canonical_json, sha256_bytes

WORKLOAD_SCHEMA = "infkit/workload/v1"
OFFSET_DECIMALS = 6  # send offsets are rounded to the microsecond before they are written
RULE = "workload-consistent"


@dataclass(frozen=True)
class Request:
    """One request of a workload; ``offset_s`` is None in a closed loop."""

    index: int
    input_tokens: int
    output_tokens: int
    offset_s: float | None = None
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    group: int | None = None
    prefix_tokens: int | None = None
    conversation: int | None = None
    turn: int | None = None
    priority: int | None = None  # scheduling priority, vLLM's convention: lower is served first
    hash_ids: tuple[int, ...] | None = None  # a trace's block ids, one per leading block of the prompt
    think_s: float | None = None  # sessions: seconds after the previous turn ends before this one is sent

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "offset_s": self.offset_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.prompt is not None:
            out["prompt"] = self.prompt
        if self.messages is not None:
            out["messages"] = [dict(m) for m in self.messages]
        for name in ("group", "prefix_tokens", "conversation", "turn", "priority", "think_s"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.hash_ids is not None:
            out["hash_ids"] = list(self.hash_ids)
        return out

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Request:
        messages = obj.get("messages")
        return cls(
            index=obj["index"],
            input_tokens=obj["input_tokens"],
            output_tokens=obj["output_tokens"],
            offset_s=obj.get("offset_s"),
            prompt=obj.get("prompt"),
            messages=tuple(dict(m) for m in messages) if messages is not None else None,
            group=obj.get("group"),
            prefix_tokens=obj.get("prefix_tokens"),
            conversation=obj.get("conversation"),
            turn=obj.get("turn"),
            priority=obj.get("priority"),
            hash_ids=tuple(obj["hash_ids"]) if obj.get("hash_ids") is not None else None,
            think_s=obj.get("think_s"),
        )


@dataclass(frozen=True)
class Workload:
    """A header (dict, as in the file) and its requests in index order."""

    header: dict[str, Any]
    requests: tuple[Request, ...] = field(default_factory=tuple)

    @property
    def workload_id(self) -> str:
        return self.header["workload_id"]

    @property
    def kind(self) -> str:
        return self.header["kind"]

    @property
    def arrival(self) -> dict[str, Any]:
        return self.header["arrival"]


def canonical_line(obj: Any) -> bytes:
    return canonical_json(obj) + b"\n"


def canonical_bytes(header: dict[str, Any], requests: tuple[Request, ...] | list[Request]) -> bytes:
    return canonical_line(header) + b"".join(canonical_line(r.to_dict()) for r in requests)


def compute_workload_id(header: dict[str, Any], requests: tuple[Request, ...] | list[Request]) -> str:
    blank = {**header, "workload_id": ""}
    return sha256_bytes(canonical_bytes(blank, requests))


def finish_workload(header: dict[str, Any], requests: list[Request]) -> Workload:
    """Fill the derived header fields (counts, token summaries, id) and return the workload."""
    if not requests:
        raise InvalidInput("a workload needs at least one request")
    head = dict(header)
    head["schema"] = WORKLOAD_SCHEMA
    head["request_count"] = len(requests)
    head["token_counts"] = {
        "input": token_summary([r.input_tokens for r in requests]),
        "output": token_summary([r.output_tokens for r in requests]),
    }
    head["workload_id"] = ""
    head["workload_id"] = compute_workload_id(head, requests)
    problems = validate_document(head)
    if problems:  # flags are checked first; this keeps a header that slipped through from being written
        raise InvalidInput(f"the workload header would not be valid: {problems[0]}")
    return Workload(header=head, requests=tuple(requests))


def write_workload(path: str | os.PathLike, workload: Workload) -> Path:
    return atomic_write_bytes(path, canonical_bytes(workload.header, workload.requests))


def _consistency(header: dict[str, Any], lines: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    """What the schema cannot see: count, order, schedule, token summaries and the id against the content."""
    requests = [Request.from_dict(obj) for _, obj in lines]
    problems = []
    if len(requests) != header["request_count"]:
        problems.append(Problem("line 1/request_count", RULE, f"the header says {header['request_count']} requests, "
                                f"the file has {len(requests)} (lines dropped or added)"))
    for position, (lineno, req) in enumerate(zip((n for n, _ in lines), requests, strict=True)):
        if req.index != position:
            problems.append(Problem(f"line {lineno}/index", RULE, f"request index {req.index} where {position} belongs "
                                    "(lines dropped, duplicated or reordered)"))
            break
    recomputed = compute_workload_id(header, requests)
    if recomputed != header["workload_id"]:
        problems.append(Problem("line 1/workload_id", RULE, f"workload_id {header['workload_id']} does not match "
                                f"its content ({recomputed}): the file was edited after it was made"))
    closed = header["arrival"]["process"] == "closed"
    offsets = [r.offset_s for r in requests]
    if closed and any(o is not None for o in offsets):
        problems.append(Problem("line 1/arrival", RULE,
                                "a closed loop has no send offsets, yet requests carry offset_s"))
    elif not closed and (None in offsets or offsets != sorted(offsets)):
        problems.append(
            Problem("line 1/arrival", RULE, "a timed schedule needs every offset_s, in non-decreasing order")
        )
    if requests:
        counts = {
            "input": token_summary([r.input_tokens for r in requests]),
            "output": token_summary([r.output_tokens for r in requests]),
        }
        if counts != header["token_counts"]:
            problems.append(Problem("line 1/token_counts", RULE, "token_counts do not summarize the requests"))
    return problems


def workload_file_problems(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    """The file check ``validate`` and ``load_workload`` share (registered for the workload marker)."""
    return _consistency(lines[0][1], lines[1:])


register_file_check(WORKLOAD_SCHEMA, workload_file_problems)


def load_workload(path: str | os.PathLike) -> Workload:
    """Read, schema-check and re-hash a workload file; a changed file is a clear error."""
    p = Path(path)
    header = next(iter_jsonl(p))[1]
    if header.get("schema") != WORKLOAD_SCHEMA:
        kind = f"a {header['schema']!r} document" if "schema" in header else 'a line without a "schema" marker'
        raise InvalidInput(f"{p}: the first line is {kind}, not a workload header ({WORKLOAD_SCHEMA})")
    problems = validate_file(p)
    if problems:
        hint = "re-make it with `infkit workload make`" if problems[0].rule == RULE else None
        raise InvalidInput(
            f"{p}: not a valid workload file: {problems[0]}"
            + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
            hint=hint,
        )
    lines = [obj for _, obj in iter_jsonl(p)]
    return Workload(header=lines[0], requests=tuple(Request.from_dict(obj) for obj in lines[1:]))
