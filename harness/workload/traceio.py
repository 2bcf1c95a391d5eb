"""Trace files read into rows, scaled and sliced: no tokenizer, so the simulator replays the same rows.

Formats (``--trace-format``):

- ``infkit``: JSONL of ``timestamp_s`` (or ``timestamp`` in ms), ``input_tokens|input_length``,
  ``output_tokens|output_length``; rows are sorted by time.
- ``mooncake``: JSONL of exactly ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``; each
  hash id names one block of ``--trace-block-tokens`` tokens (512 in the public traces), the last one partial.
- ``azure``: the Azure LLM inference trace CSV: ``TIMESTAMP`` (a date-time or seconds), ``ContextTokens``,
  ``GeneratedTokens``.
- ``burstgpt``: the BurstGPT CSV: ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type``; ``--trace-filter "Model=GPT-4,Log Type=Conversation log"`` keeps matching rows;
  rows with 0 response tokens (failed requests in the public trace) are skipped and counted.

Every format but ``infkit`` needs non-decreasing timestamps. A malformed row is one ``InvalidInput`` naming
``file:line``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.contract.jsonio import is_finite_number, iter_json_lines, json_type
from harness.errors import InvalidInput

FORMATS = ("infkit", "mooncake", "azure", "burstgpt")
MAX_TOKENS = 10_000_000
MAX_ROWS = 1_000_000
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: seconds, token lengths, and the trace's block ids (mooncake) or None."""

    line: int
    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TraceSlice:
    """How a trace becomes a workload's rows; defaults keep the trace as it is."""

    trace_format: str = "infkit"
    trace_block_tokens: int = 512
    block_tokens: int | None = None  # rescale every hash-id block to this many tokens
    length_scale: float | None = None  # other lengths; default block_tokens / trace_block_tokens
    time_scale: float = 1.0
    max_requests: int | None = None
    window: str | None = None  # "A:B": seconds after the first row's timestamp, before time scaling
    trace_filter: str | None = None  # burstgpt: "Column=value,Column=value"

    @property
    def block(self) -> int:
        return self.block_tokens or self.trace_block_tokens

    @property
    def scale(self) -> float:
        return self.length_scale if self.length_scale is not None else self.block / self.trace_block_tokens


def _count(value: Any, name: str, where: str, minimum: int = 1) -> int:
    if type(value) is not int or not minimum <= value <= MAX_TOKENS:
        raise InvalidInput(f"{where}: {name} {value!r:.40} is not a whole number of tokens in "
                           f"[{minimum}, {MAX_TOKENS}]")
    return value


def _field(obj: dict[str, Any], names: tuple[str, ...], where: str) -> tuple[str, Any]:
    for name in names:
        if name in obj:
            return name, obj[name]
    raise InvalidInput(f"{where}: no {' or '.join(names)}",
                       hint="a trace row needs timestamp_s (or timestamp in ms), input_tokens|input_length, "
                       "output_tokens|output_length")


def _time(value: Any, name: str, where: str) -> float:
    if not is_finite_number(value) or value < 0:
        raise InvalidInput(f"{where}: {name} is {json_type(value)} {value!r:.40}, not a finite number >= 0")
    return float(value)


def _infkit(path: Path) -> list[TraceRow]:
    rows = []
    for lineno, obj in iter_json_lines(path):
        where = f"{path}:{lineno}"
        name, ts = _field(obj, ("timestamp_s", "timestamp"), where)
        t = _time(ts, name, where)
        in_name, n_in = _field(obj, ("input_tokens", "input_length"), where)
        out_name, n_out = _field(obj, ("output_tokens", "output_length"), where)
        rows.append(TraceRow(lineno, t / 1000.0 if name == "timestamp" else t,
                             _count(n_in, in_name, where), _count(n_out, out_name, where)))
    return sorted(rows, key=lambda r: r.t_s)


def _mooncake(path: Path, block_tokens: int) -> list[TraceRow]:
    rows = []
    for lineno, obj in iter_json_lines(path):
        where = f"{path}:{lineno}"
        unknown = sorted(set(obj) - set(MOONCAKE_KEYS))
        if unknown:
            raise InvalidInput(f"{where}: unknown field {unknown[0]!r}",
                               hint=f"a mooncake row has {', '.join(MOONCAKE_KEYS)}")
        missing = [k for k in MOONCAKE_KEYS if k not in obj]
        if missing:
            raise InvalidInput(f"{where}: no {missing[0]}", hint=f"a mooncake row has {', '.join(MOONCAKE_KEYS)}")
        n_in = _count(obj["input_length"], "input_length", where)
        ids = obj["hash_ids"]
        if type(ids) is not list or any(type(h) is not int or h < 0 for h in ids):
            raise InvalidInput(f"{where}: hash_ids is not a list of whole numbers >= 0")
        if len(ids) > math.ceil(n_in / block_tokens):
            raise InvalidInput(f"{where}: {len(ids)} hash ids, but input_length {n_in} fills only "
                               f"{math.ceil(n_in / block_tokens)} blocks of {block_tokens} tokens",
                               hint="check --trace-block-tokens")
        rows.append(TraceRow(lineno, _time(obj["timestamp"], "timestamp", where) / 1000.0, n_in,
                             _count(obj["output_length"], "output_length", where), tuple(ids)))
    return rows


def _csv_rows(path: Path, columns: tuple[str, ...], required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"--trace {path}: cannot read it as UTF-8 text: {exc}") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        raise InvalidInput(f"{path}:1: no header row")
    header = [h.strip() for h in header]
    unknown = [h for h in header if h not in columns]
    if unknown:
        raise InvalidInput(f"{path}:1: unknown column {unknown[0]!r}", hint=f"columns: {', '.join(columns)}")
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidInput(f"{path}:1: no column {missing[0]!r}")
    out = []
    for lineno, cells in enumerate(reader, 2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise InvalidInput(f"{path}:{lineno}: {len(cells)} cells where the header has {len(header)}")
        out.append((lineno, dict(zip(header, (c.strip() for c in cells), strict=True))))
    return out


def _number(text: str, name: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{where}: {name} {text!r:.40} is not a number") from None
    if not math.isfinite(value):
        raise InvalidInput(f"{where}: {name} {text!r:.40} is not finite")
    return value


def _int_cell(text: str, name: str, where: str, minimum: int = 1) -> int:
    value = _number(text, name, where)
    return _count(int(value) if value.is_integer() else value, name, where, minimum)


def _azure_time(text: str, where: str) -> float:
    try:
        return _time(float(text), "TIMESTAMP", where)
    except ValueError:
        pass
    base, _, frac = text.partition(".")
    try:
        stamp = datetime.fromisoformat(base)
        return stamp.timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise InvalidInput(f"{where}: TIMESTAMP {text!r:.40} is neither seconds nor a date-time") from None


def _azure(path: Path) -> list[TraceRow]:
    rows = []
    for lineno, cells in _csv_rows(path, AZURE_COLUMNS, AZURE_COLUMNS):
        where = f"{path}:{lineno}"
        rows.append(TraceRow(lineno, _azure_time(cells["TIMESTAMP"], where),
                             _int_cell(cells["ContextTokens"], "ContextTokens", where),
                             _int_cell(cells["GeneratedTokens"], "GeneratedTokens", where)))
    return rows


def _filters(spec: str | None) -> dict[str, str]:
    out = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in BURSTGPT_COLUMNS:
            raise InvalidInput(f"--trace-filter {item!r}: use COLUMN=VALUE with COLUMN one of "
                               f"{', '.join(BURSTGPT_COLUMNS)}")
        out[key.strip()] = value.strip()
    return out


def _burstgpt(path: Path, filter_spec: str | None) -> tuple[list[TraceRow], int]:
    wanted = _filters(filter_spec)
    rows, skipped = [], 0
    required = ("Timestamp", "Request tokens", "Response tokens")
    for lineno, cells in _csv_rows(path, BURSTGPT_COLUMNS, required):
        where = f"{path}:{lineno}"
        t = _time(_number(cells["Timestamp"], "Timestamp", where), "Timestamp", where)
        n_in = _int_cell(cells["Request tokens"], "Request tokens", where)
        n_out = _int_cell(cells["Response tokens"], "Response tokens", where, minimum=0)
        if any(cells.get(k) != v for k, v in wanted.items()):
            continue
        if n_out == 0:
            skipped += 1
            continue
        rows.append(TraceRow(lineno, t, n_in, n_out))
    return rows, skipped


def read_trace(path: str | Path, spec: TraceSlice) -> tuple[list[TraceRow], int]:
    """Rows of the trace in time order, and how many rows a format rule skipped."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"--trace {p}: no such file")
    if spec.trace_format not in FORMATS:
        raise InvalidInput(f"--trace-format {spec.trace_format!r}", hint=f"choose one of: {', '.join(FORMATS)}")
    skipped = 0
    if spec.trace_format == "infkit":
        rows = _infkit(p)
    elif spec.trace_format == "mooncake":
        rows = _mooncake(p, spec.trace_block_tokens)
    elif spec.trace_format == "azure":
        rows = _azure(p)
    else:
        rows, skipped = _burstgpt(p, spec.trace_filter)
    for before, row in zip(rows, rows[1:], strict=False):
        if row.t_s < before.t_s:
            raise InvalidInput(f"{p}:{row.line}: timestamp goes back in time (after line {before.line})",
                               hint="a trace lists requests in arrival order")
    if not rows:
        raise InvalidInput(f"--trace {p}: no rows" + (" match --trace-filter" if spec.trace_filter else ""))
    if len(rows) > MAX_ROWS:
        raise InvalidInput(f"--trace {p}: {len(rows)} rows; at most {MAX_ROWS} requests")
    return rows, skipped


def _window(spec: str | None) -> tuple[float, float] | None:
    if spec is None:
        return None
    a, sep, b = spec.partition(":")
    try:
        lo, hi = float(a or 0), float(b) if b else math.inf
    except ValueError:
        lo, hi = math.nan, math.nan
    if not sep or not (0 <= lo < hi):
        raise InvalidInput(f"--window {spec!r}: use START:END in seconds after the trace's first request, START < END")
    return lo, hi


def check_slice(spec: TraceSlice) -> None:
    """The slice's own flags, before any file is read."""
    if spec.trace_block_tokens < 1 or (spec.block_tokens is not None and spec.block_tokens < 1):
        raise InvalidInput("--trace-block-tokens and --block-tokens must be >= 1")
    for flag, value in (("--length-scale", spec.length_scale), ("--time-scale", spec.time_scale)):
        if value is not None and not (is_finite_number(value) and value > 0):
            raise InvalidInput(f"{flag} {value}: must be a finite number > 0")
    if spec.max_requests is not None and not 1 <= spec.max_requests <= MAX_ROWS:
        raise InvalidInput(f"--max-requests {spec.max_requests}: must be in [1, {MAX_ROWS}]")
    if spec.trace_format not in FORMATS:
        raise InvalidInput(f"--trace-format {spec.trace_format!r}", hint=f"choose one of: {', '.join(FORMATS)}")
    _window(spec.window)
    _filters(spec.trace_filter)


def scaled_rows(path: str | Path, spec: TraceSlice, limit: int | None = None) -> tuple[list[TraceRow], int]:
    """The slice of the trace (window, then the first ``max_requests``/``limit``), scaled: every hash-id block
    becomes ``spec.block`` tokens, other lengths scale by ``spec.scale``, times by ``time_scale`` from 0."""
    check_slice(spec)
    rows, skipped = read_trace(path, spec)
    first = rows[0].t_s
    span = _window(spec.window)
    if span is not None:
        rows = [r for r in rows if span[0] <= r.t_s - first < span[1]]
        if not rows:
            raise InvalidInput(f"--window {spec.window}: no request of {path} falls in it")
        first = rows[0].t_s
    cap = min(x for x in (spec.max_requests, limit, len(rows)) if x is not None)
    out = []
    for r in rows[:cap]:
        n_in = max(1, round(r.input_tokens * spec.scale))
        if r.hash_ids:  # every block stays: the last one at least one token long
            n_in = max(n_in, (len(r.hash_ids) - 1) * spec.block + 1)
        out.append(replace(r, t_s=(r.t_s - first) * spec.time_scale, input_tokens=min(n_in, MAX_TOKENS),
                           output_tokens=max(1, round(r.output_tokens * spec.scale))))
    return out, skipped


def sharing(rows: list[TraceRow], block: int) -> dict[str, Any]:
    """What a perfect prefix cache could reuse: per request, the leading tokens an earlier request already had.

    Blocks are keyed by their chain of ids (a block reused after another parent is not a prefix hit); a
    request reuses each leading block up to the tokens of it seen before, stops at the first block not
    fully seen, and recomputes at least its last token.
    """
    seen: dict[tuple[int, ...], int] = {}
    reusable = total = 0
    for r in rows:
        total += r.input_tokens
        hit, full = 0, True
        for j, h in enumerate(r.hash_ids or ()):
            key = (*r.hash_ids[: j], h)
            have = min(block, r.input_tokens - j * block)
            if full:
                got = min(have, seen.get(key, 0))
                hit += got
                full = got == block
            seen[key] = max(seen.get(key, 0), have)
        reusable += min(hit, r.input_tokens - 1)
    return {"block_tokens": block, "distinct_blocks": len({h for r in rows for h in (r.hash_ids or ())}),
            "prompt_tokens": total, "reusable_tokens": reusable,
            "reuse_ceiling": round(reusable / total, 6) if total else 0.0}
