"""Per-request records and their append-only file, ``requests.jsonl``.

Times are seconds since the run's start ``t0`` on ``time.monotonic()`` (CLOCK_MONOTONIC,
shared by every process on the machine, so worker processes agree on one clock).
Each record is written with one ``os.write`` on an ``O_APPEND`` descriptor as soon as
its request ends: lines from several worker processes never interleave, and a crash
loses nothing that completed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.contract.jsonio import parse_json
from harness.errors import InvalidInput

# The result schema's termination enum; "ok" statuses are the ones with a complete stream.
STATUSES = ("stop", "length", "aborted", "timeout", "error", "disconnected", "cancelled", "not_sent")
COMPLETED = ("stop", "length")


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request of the workload, as the client measured it.

    TTFT runs from ``sent_s`` to ``first_token_s`` (``harness.serving.metrics.per_request``); the
    simulator's ``harness.mech.engine.types.SimRequestRecord`` counts from arrival instead.
    """

    index: int
    status: str
    scheduled_s: float | None = None  # when the schedule wanted it sent (closed loop: when its slot freed)
    slot_s: float | None = None  # when a concurrency slot freed, if it had to wait for one
    sent_s: float | None = None  # just before the HTTP request was written
    first_token_s: float | None = None  # first chunk carrying generated text
    end_s: float | None = None  # last content chunk or stream end
    chunk_s: tuple[float, ...] = ()  # arrival time of every content chunk
    chunk_tokens: tuple[int, ...] = ()  # tokens each content chunk carried (per-chunk usage); () when not sent
    chunk_chars: tuple[int, ...] = ()  # without per-chunk usage: characters of each chunk's text (tokenizer fallback)
    input_tokens: int | None = None  # as the workload states
    output_tokens_requested: int | None = None
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None  # as the server sent it
    http_status: int | None = None
    error: str | None = None
    output_text: str | None = None
    worker: int = 0
    server_data_error: str | None = None  # server-reported values that were not sane, recorded as absent: why
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status in COMPLETED

    @property
    def send_lag_s(self) -> float | None:
        """Client lateness: sent minus the moment it could first have been sent."""
        if self.sent_s is None or self.scheduled_s is None:
            return None
        ready = self.slot_s if self.slot_s is not None else self.scheduled_s
        return max(0.0, self.sent_s - ready)

    def to_json(self) -> str:
        # A flat field walk: dataclasses.asdict deep-copies every chunk time, which shows up
        # at thousands of records per second.
        obj = {name: getattr(self, name) for name in _FIELDS}
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in obj.items() if k in known}
        if type(values.get("index")) is not int or not isinstance(values.get("status"), str):
            raise TypeError("needs an integer index and a status")
        for name in ("chunk_s", "chunk_tokens", "chunk_chars"):
            values[name] = tuple(values.get(name) or ())
        return cls(**values)


_FIELDS = tuple(f.name for f in fields(RequestRecord))


class RecordWriter:
    """Append-only JSONL writer; safe to share a path between processes."""

    def __init__(self, path: str | os.PathLike, *, truncate: bool = False):
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(self.path, flags, 0o644)

    def write(self, record: RequestRecord) -> None:
        try:
            line = (record.to_json() + "\n").encode("utf-8")
        except (ValueError, TypeError) as exc:  # a value JSON cannot hold: keep the request accounted for
            stub = RequestRecord(index=record.index, status="error", input_tokens=record.input_tokens,
                                 output_tokens_requested=record.output_tokens_requested, worker=record.worker,
                                 error=f"the record could not be written as JSON ({type(exc).__name__}); "
                                 f"it ended as {record.status!r}")
            line = (stub.to_json() + "\n").encode("utf-8")
        os.write(self._fd, line)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | os.PathLike) -> list[RequestRecord]:
    """Records of a ``requests.jsonl`` sorted by index (the last record wins for a repeated index).

    A torn last line (the writer was killed mid-write) is skipped; a bad line elsewhere is an error.
    """
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return []
    lines = p.read_bytes().split(b"\n")
    by_index: dict[int, RequestRecord] = {}
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            rec = RequestRecord.from_dict(parse_json(raw, where))
        except (InvalidInput, TypeError) as exc:
            if lineno == len(lines):
                break
            raise InvalidInput(f"{where}: not a request record: {str(exc).removeprefix(where + ': ')}") from None
        by_index[rec.index] = rec
    return [by_index[i] for i in sorted(by_index)]
