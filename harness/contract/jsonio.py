"""The one strict JSON layer: every infkit reader parses through it, every writer dumps through it.

JSON here is RFC 8259 without Python's extensions. Refused, each with the file, the
line and the JSON pointer of the value in a one-line ``DocumentError``:

- ``NaN``, ``Infinity`` and numbers beyond the float range (``1e999`` parses to inf);
- integers longer than ``MAX_INT_DIGITS`` digits — caught in the parser, before
  Python's own 4300-digit limit turns them into a bare ``ValueError``;
- strings (values or keys) holding a lone UTF-16 surrogate (``"\\ud800"``): they
  cannot be written back as UTF-8, so hashing or re-writing them would fail later;
- nesting deeper than ``MAX_DEPTH`` (later recursive code would hit Python's
  recursion limit), binary input, invalid UTF-8, and a top-level value of the
  wrong type (a JSON Lines record that is an array, a number, ``null``, ...).

Writers use ``dumps_bytes``: the same rules, so a document infkit writes is one it
can read back, and a value that breaks them is a clear error naming its pointer
instead of a ``ValueError`` from deep inside ``json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import InvalidInput

MAX_INT_DIGITS = 40  # > 2**128; every count, id, seed and timestamp infkit reads is far shorter
_INT_LIMIT = 10**MAX_INT_DIGITS
MAX_DEPTH = 64  # infkit documents nest < 10 levels
MAX_JSON_BYTES = 32 * 1024 * 1024  # one JSON document, or one line of a JSON Lines file
BINARY_PROBE_BYTES = 8192
_SURROGATE = re.compile("[\ud800-\udfff]")


class DocumentError(InvalidInput):
    """A file cannot be read as a JSON document (missing, binary, malformed, out-of-range values, ...)."""


class HugeInt:
    """Stands in for an over-long integer literal until the walk reports where it is."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits

    def __str__(self) -> str:
        return f"<integer of {self.digits} digits>"


def _parse_int(text: str) -> int | HugeInt:
    digits = len(text) - (text[0] == "-")
    return HugeInt(digits) if digits > MAX_INT_DIGITS else int(text)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def raw_decode_capped(text: str) -> tuple[Any, int]:
    """``JSONDecoder.raw_decode`` with over-long integers as ``HugeInt`` markers (NaN passes through):
    for callers that record a bad value as absent instead of refusing the whole text."""
    return _DECODER.raw_decode(text)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type."""
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number", HugeInt: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _scalar_problem(value: Any) -> str | None:
    kind = type(value)
    if kind is float:
        if value - value != 0.0:  # NaN or +-inf
            return f"{'NaN' if value != value else 'an infinite number'} (JSON numbers must be finite)"
    elif kind is str:
        if not value.isascii() and _SURROGATE.search(value):
            return "a string with a lone UTF-16 surrogate (not encodable as UTF-8)"
    elif kind is HugeInt:
        return f"an integer of {value.digits} digits (at most {MAX_INT_DIGITS})"
    elif kind is int and not -_INT_LIMIT < value < _INT_LIMIT:  # a writer's value no reader would accept
        return f"an integer of more than {MAX_INT_DIGITS} digits"
    return None


def _pointer(path: tuple | None) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        text = str(key).encode("utf-8", "backslashreplace").decode("utf-8")  # printable even when it is the problem
        parts.append(text.replace("~", "~0").replace("/", "~1"))
    pointer = "/" + "/".join(reversed(parts)) if parts else "/"
    return pointer if len(pointer) <= 120 else pointer[:117] + "..."


def find_problem(obj: Any) -> tuple[str, str] | None:
    """(JSON pointer, what is wrong) for the first value the rules above refuse, else None.

    Iterative, so it cannot itself hit the recursion limit; pointers are built only on failure.
    """
    if (problem := _scalar_problem(obj)) is not None:
        return "/", problem
    if not isinstance(obj, (dict, list, tuple)):
        return None
    stack: list[tuple[Any, tuple | None, int]] = [(obj, None, 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return _pointer(path), f"nested deeper than {MAX_DEPTH} levels"
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if type(key) is str and not key.isascii() and _SURROGATE.search(key):
                return _pointer((path, key)), "a key with a lone UTF-16 surrogate (not encodable as UTF-8)"
            kind = type(value)
            if kind is dict or kind is list or kind is tuple:
                stack.append((value, (path, key), depth + 1))
            elif (problem := _scalar_problem(value)) is not None:
                return _pointer((path, key)), problem
    return None


def parse_json(text: str | bytes, where: str, *, expect: type | None = dict) -> Any:
    """Parse one JSON text strictly; ``where`` names it in errors (``file`` or ``file:line``)."""
    if isinstance(text, (bytes, bytearray)):
        text = _decode(bytes(text), where)
    try:
        obj = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{where}: malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise DocumentError(f"{where}: JSON nested too deeply to be an infkit document") from None
    problem = find_problem(obj)
    if problem is not None:
        raise DocumentError(f"{where}: {problem[1]} at {problem[0]}")
    if expect is not None and not isinstance(obj, expect):
        wanted = "a JSON object" if expect is dict else f"a JSON {json_type(expect())}"
        got = json_type(obj)
        got = got if got == "null" else f"{'an' if got[0] in 'aeiou' else 'a'} {got}"
        raise DocumentError(f"{where}: a document is {wanted}, not {got}")
    return obj


def _decode(data: bytes, where: str) -> str:
    if b"\x00" in data[:BINARY_PROBE_BYTES]:
        raise DocumentError(f"{where}: binary file, not JSON text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{where}: not UTF-8 text (byte {exc.start})") from None


def _check_readable(path: Path) -> os.stat_result:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DocumentError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ENOTDIR, EACCES; a NUL in the name
        raise DocumentError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise DocumentError(f"{path}: is a directory, not a JSON file")
    if not stat.S_ISREG(info.st_mode):
        raise DocumentError(f"{path}: not a regular file (a pipe, socket or device cannot be read as JSON)")
    if info.st_size == 0:
        raise DocumentError(f"{path}: empty file")
    return info


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_json(path: str | os.PathLike, *, limit: int = MAX_JSON_BYTES, expect: type | None = dict) -> Any:
    """Read and parse one JSON document file with a clear error for every bad-input case."""
    p = Path(path)
    size = _check_readable(p).st_size
    if size > limit:
        raise DocumentError(f"{p}: {size / 1e6:.1f} MB is larger than the {limit // (1024 * 1024)} MiB limit "
                            "for one JSON document")
    with _open(p) as fh:
        data = fh.read(limit + 1)
    return parse_json(data, str(p), expect=expect)


def iter_json_lines(path: str | os.PathLike, *, expect: type | None = dict) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of a JSON Lines file.

    A file with no JSON line at all (only blank lines) is an error, as is a line longer
    than ``MAX_JSON_BYTES``.
    """
    p = Path(path)
    _check_readable(p)
    seen = False
    with _open(p) as fh:
        lineno = 0
        while raw := fh.readline(MAX_JSON_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_JSON_BYTES:
                raise DocumentError(f"{p}:{lineno}: line longer than {MAX_JSON_BYTES // (1024 * 1024)} MiB")
            if b"\x00" in raw:
                raise DocumentError(f"{p}:{lineno}: binary file, not JSON Lines")
            if raw.strip():
                seen = True
                yield lineno, parse_json(raw, f"{p}:{lineno}", expect=expect)
    if not seen:
        raise DocumentError(f"{p}: no JSON lines (the file holds only blank lines)")


def dumps_bytes(obj: Any, where: str, **options: Any) -> bytes:
    """``json.dumps(obj, **options)`` as UTF-8, or a one-line error naming the value JSON (as infkit
    reads it back) cannot hold: what infkit writes, it can read."""
    problem = find_problem(obj)
    if problem is not None:
        raise InvalidInput(f"cannot write {where} as JSON: {problem[1]} at {problem[0]}")
    return json.dumps(obj, allow_nan=False, ensure_ascii=False, **options).encode("utf-8")


def is_finite_number(value: Any) -> bool:
    """A JSON number infkit accepts: an int or a finite float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
