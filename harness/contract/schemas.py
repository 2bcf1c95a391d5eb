"""Schema loading and document validation.

A document names its own schema with a top-level ``"schema"`` marker (e.g.
``"infkit/result/v1"``); the marker is the ``const`` of the ``schema`` property
of one file in ``schemas/``, so adding a schema file registers it. JSON Lines
files (``.jsonl``) are validated line by line: the first line is the header
document, the following lines are checked against the header schema's
``$defs/request`` when it has one.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from harness.errors import InvalidInput

SCHEMA_DIR = Path(os.environ.get("INFKIT_SCHEMA_DIR", Path(__file__).resolve().parents[2] / "schemas"))
MAX_JSON_BYTES = 32 * 1024 * 1024  # a single JSON document; JSONL files are streamed


class DocumentError(InvalidInput):
    """A file cannot be read as a JSON document (missing, binary, malformed, ...)."""


@dataclass(frozen=True)
class Problem:
    """One broken rule: where (JSON pointer) and which rule."""

    pointer: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message} [rule: {self.rule}]"


@functools.cache
def _registry() -> dict[str, Path]:
    markers: dict[str, Path] = {}
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        schema = json.loads(path.read_text())
        marker = schema.get("properties", {}).get("schema", {}).get("const")
        if marker:
            markers[marker] = path
    return markers


def known_markers() -> list[str]:
    return sorted(_registry())


@functools.cache
def schema_for(marker: str) -> dict[str, Any]:
    path = _registry().get(marker)
    if path is None:
        raise DocumentError(
            f"unknown document kind {marker!r}",
            hint=f"known kinds: {', '.join(known_markers())}",
        )
    return json.loads(path.read_text())


@functools.cache
def _validator(marker: str, definition: str | None = None) -> Draft202012Validator:
    schema = schema_for(marker)
    if definition:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    return Draft202012Validator(schema, format_checker=FormatChecker())


def _resolve_local(schema: dict[str, Any], ref: str) -> Any:
    node: Any = schema
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _rule_name(error: ValidationError, schema: dict[str, Any]) -> str:
    """Name the broken rule: the keyword, plus the nearest rule description on the path."""
    node: Any = schema
    described = None
    for step in error.absolute_schema_path:
        try:
            # jsonschema's path steps through a $ref without naming it
            while isinstance(node, dict) and step not in node and str(node.get("$ref", "")).startswith("#/"):
                node = _resolve_local(schema, node["$ref"])
            node = node[step]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, dict) and "description" in node and "if" in node:
            described = node["description"]
    keyword = error.validator
    if keyword == "additionalProperties":
        return "additionalProperties (unknown field; check the name and its unit suffix)"
    if keyword == "required":
        return f"required{f' ({described})' if described else ''}"
    return f"{keyword}{f' ({described})' if described else ''}"


def _problems(validator: Draft202012Validator, doc: Any, prefix: str = "") -> list[Problem]:
    problems = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        # For oneOf/anyOf failures, report the most specific sub-error.
        leaf = error
        if error.context:
            leaf = min(error.context, key=lambda e: (-len(e.absolute_path), len(e.absolute_schema_path)))
        pointer = prefix + "".join(f"/{p}" for p in error.absolute_path)
        if leaf is not error:
            pointer = prefix + "".join(f"/{p}" for p in leaf.absolute_path)
        problems.append(Problem(pointer, _rule_name(leaf, validator.schema), leaf.message))
    return problems


def validate_document(doc: Any) -> list[Problem]:
    """Validate one parsed document (schema, then the evidence rules for results)."""
    if not isinstance(doc, dict):
        return [Problem("", "type", f"a document is a JSON object, not {type(doc).__name__}")]
    marker = doc.get("schema")
    if not isinstance(marker, str):
        raise DocumentError('no "schema" marker', hint=f"expected one of: {', '.join(known_markers())}")
    problems = _problems(_validator(marker), doc)
    if marker == "infkit/result/v1" and not problems:
        from harness.contract.rules import check_result_rules

        problems.extend(check_result_rules(doc))
    return problems


def _read_text(path: Path, limit: int | None) -> str:
    if not path.exists():
        raise DocumentError(f"{path}: no such file")
    if path.is_dir():
        raise DocumentError(f"{path}: is a directory, not a JSON file")
    size = path.stat().st_size
    if size == 0:
        raise DocumentError(f"{path}: empty file")
    if limit is not None and size > limit:
        raise DocumentError(
            f"{path}: {size / 1e6:.1f} MB is larger than the {limit // (1024 * 1024)} MiB limit for one JSON document"
        )
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise DocumentError(f"{path}: binary file, not JSON")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{where}: malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise DocumentError(f"{where}: JSON nested too deeply to be an infkit document") from None


def load_document(path: str | os.PathLike) -> Any:
    """Read and parse one JSON document with clear errors for every bad-input case."""
    p = Path(path)
    return _parse(_read_text(p, MAX_JSON_BYTES), str(p))


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-empty line of a JSON Lines file."""
    p = Path(path)
    if not p.exists():
        raise DocumentError(f"{p}: no such file")
    if p.is_dir():
        raise DocumentError(f"{p}: is a directory, not a JSON Lines file")
    if p.stat().st_size == 0:
        raise DocumentError(f"{p}: empty file")
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if b"\x00" in raw:
                raise DocumentError(f"{p}: binary content at line {lineno}, not JSON Lines")
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DocumentError(f"{p}: line {lineno} is not UTF-8 text") from None
            if line:
                yield lineno, _parse(line, f"{p}:{lineno}")


def validate_file(path: str | os.PathLike) -> list[Problem]:
    """Validate a JSON document or a JSON Lines file with a header line."""
    p = Path(path)
    if p.suffix != ".jsonl":
        return validate_document(load_document(p))
    problems: list[Problem] = []
    request_validator = None
    for lineno, obj in iter_jsonl(p):
        if request_validator is None:
            problems.extend(Problem(f"line {lineno}{x.pointer}", x.rule, x.message) for x in validate_document(obj))
            defs = schema_for(obj["schema"]).get("$defs", {})
            request_validator = _validator(obj["schema"], "request") if "request" in defs else False
        elif request_validator:
            problems.extend(_problems(request_validator, obj, prefix=f"line {lineno}"))
    return problems
