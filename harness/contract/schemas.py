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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from harness.contract.jsonio import MAX_JSON_BYTES, DocumentError, iter_json_lines, read_json
from harness.contract.problems import Problem
from harness.contract.rules import check_result_rules
from harness.errors import InvalidInput

SCHEMA_DIR = Path(os.environ.get("INFKIT_SCHEMA_DIR", Path(__file__).resolve().parents[2] / "schemas"))
__all__ = ["MAX_JSON_BYTES", "SCHEMA_DIR", "DocumentError", "Problem", "load_document", "iter_jsonl",
           "register_file_check", "require_valid", "schema_for", "value_problem", "validate_document", "validate_file"]


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


def value_problem(marker: str, schema_path: str, value: Any) -> str | None:
    """Why ``value`` would break the rule at ``schema_path`` of ``marker``'s schema (e.g.
    ``$defs/identity/properties/run_id``), or None: a command checks a flag with the same rule
    its result will be held to, before any work starts."""
    schema = schema_for(marker)
    node = _resolve_local(schema, "#/" + schema_path)
    validator = Draft202012Validator({**node, "$defs": schema.get("$defs", {})}, format_checker=FormatChecker())
    error = next(iter(validator.iter_errors(value)), None)
    return error.message if error is not None else None


def validate_document(doc: Any) -> list[Problem]:
    """Validate one parsed document (schema, then the evidence rules for results)."""
    if not isinstance(doc, dict):
        return [Problem("", "type", f"a document is a JSON object, not {type(doc).__name__}")]
    marker = doc.get("schema")
    if not isinstance(marker, str):
        raise DocumentError('no "schema" marker', hint=f"expected one of: {', '.join(known_markers())}")
    problems = _problems(_validator(marker), doc)
    if marker == "infkit/result/v1" and not problems:
        problems.extend(check_result_rules(doc))
    return problems


def require_valid(doc: Any, marker: str, where: str, what: str) -> dict[str, Any]:
    """``doc`` when it is a valid ``marker`` document (schema, and the evidence rules for results), else one
    ``InvalidInput`` line naming ``where`` (the file), the first broken field and the rule: how every reader
    checks a document before it is read into typed objects."""
    if not isinstance(doc, dict) or doc.get("schema") != marker:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise InvalidInput(f"{where}: /schema: not {what} ({found!r}, expected {marker!r})")
    problems = validate_document(doc)
    if problems:
        message = " ".join(problems[0].message.split())[:200]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvalidInput(f"{where}: {problems[0].pointer or '/'}: {message}{more}",
                           hint="written by another infkit version, or edited by hand: rerun what wrote it")
    return doc


def load_document(path: str | os.PathLike) -> Any:
    """Read and parse one JSON document with clear errors for every bad-input case (see ``jsonio``)."""
    return read_json(path)


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-blank line of a JSON Lines file; every line is an object."""
    return iter_json_lines(path)


FileCheck = Callable[[Path, list[tuple[int, Any]]], list[Problem]]
_FILE_CHECKS: dict[str, FileCheck] = {}


def register_file_check(marker: str, check: FileCheck) -> None:
    """Add a check beyond the schema for JSON Lines files whose header carries ``marker``.

    It runs after every line passed its schema, with the (line number, object) pairs, so
    ``validate`` and the loaders agree (e.g. a workload's id, count and order). The module
    defining a kind registers its check when it is imported.
    """
    _FILE_CHECKS[marker] = check


def validate_file(path: str | os.PathLike) -> list[Problem]:
    """Validate a JSON document or a JSON Lines file with a header line (and its kind's file check)."""
    p = Path(path)
    if p.suffix != ".jsonl":
        return validate_document(load_document(p))
    problems: list[Problem] = []
    request_validator = None
    check: FileCheck | None = None
    lines: list[tuple[int, Any]] = []
    for lineno, obj in iter_jsonl(p):
        if request_validator is None:
            problems.extend(Problem(f"line {lineno}{x.pointer}", x.rule, x.message) for x in validate_document(obj))
            defs = schema_for(obj["schema"]).get("$defs", {})
            request_validator = _validator(obj["schema"], "request") if "request" in defs else False
            check = _FILE_CHECKS.get(obj["schema"])
        elif request_validator:
            problems.extend(_problems(request_validator, obj, prefix=f"line {lineno}"))
        if check is not None:
            lines.append((lineno, obj))
    if check is not None and not problems:
        problems.extend(check(p, lines))
    return problems
