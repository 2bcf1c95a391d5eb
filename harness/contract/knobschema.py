"""A config's knobs as a JSON Schema (draft 2020-12), and a document's values as the config's own types.

The schema comes from the same ``knob`` declarations that make the flags and the Make variables
(``harness.knobs``), so a knob added to a config is in its schema at once: a knob's type, bounds
(``min``, ``max``, else ``int_bound``), choices and help become the property's type, ``minimum``/``maximum``,
``enum`` and ``description``; its default is the ``default``; a list knob that may not be empty has
``minItems: 1``; an optional knob also takes ``null``; a key no knob declares is refused
(``additionalProperties: false``). ``validate_values`` checks a document against it with ``jsonschema`` and
says what is wrong in one line naming the key; ``typed_values`` turns a valid document into what the
config takes (lists become tuples, paths ``Path``, an integer given to a float knob a float).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from harness.errors import InvalidInput
from harness.knobs import choices_of, int_bound, json_value, knob_fields, unwrap_hint

DRAFT = "https://json-schema.org/draft/2020-12/schema"
JSON_TYPES: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}


def _base(kind: Any) -> Any:
    return str if typing.get_origin(kind) is Literal else kind


def _item_schema(f: dataclasses.Field, kind: Any) -> dict[str, Any]:
    base = _base(kind)
    if base not in JSON_TYPES:
        raise TypeError(f"knob {f.name}: no JSON Schema type for {base!r}")
    schema: dict[str, Any] = {"type": JSON_TYPES[base]}
    if choices := choices_of(kind, f.metadata):
        schema["enum"] = list(choices)
    if base in (int, float):
        if (low := f.metadata.get("min")) is not None:
            schema["minimum"] = low
        if (high := int_bound(f, kind)) is not None:
            schema["maximum"] = high
    return schema


def knob_property(f: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """The JSON Schema of one knob."""
    kind, many, optional = unwrap_hint(hint)
    schema = _item_schema(f, kind)
    if many:
        schema = {"type": "array", "items": schema}
        if f.default not in ((), None, dataclasses.MISSING) and not f.metadata.get("empty"):
            schema["minItems"] = 1
    if optional:
        schema = {"anyOf": [schema, {"type": "null"}]}
    default = {} if f.default is dataclasses.MISSING else {"default": json_value(f.default)}
    return {"description": f.metadata.get("help", ""), **default, **schema}


def config_schema(cls: type, *, title: str, schema_id: str, fixed: Mapping[str, dict[str, Any]] | None = None,
                  description: str = "") -> dict[str, Any]:
    """The JSON Schema of a document setting any knob of ``cls``; ``fixed``: properties it must also hold
    (required), such as the bench a run file names."""
    properties = {**(fixed or {}), **{f.name: knob_property(f, hint) for f, hint in knob_fields(cls)}}
    return {"$schema": DRAFT, "$id": schema_id, "title": title, "description": description, "type": "object",
            "required": list(fixed or {}), "additionalProperties": False, "properties": properties}


def _where(error: ValidationError) -> str:
    key, *rest = [*error.absolute_path] or ["(document)"]
    return str(key) + "".join(f"[{i}]" for i in rest)


def _innermost(error: ValidationError) -> ValidationError:
    """An optional knob's error says what its value is not (the non-null branch), not 'not valid under any'."""
    while error.validator == "anyOf" and error.context:
        error = min(error.context, key=lambda e: (e.relative_schema_path[0] != 0, len(e.absolute_path)))
    return error


def unknown_key_message(unknown: str, accepted: list[str]) -> str:
    """'unknown key' with the nearest accepted names first, then every accepted one."""
    near = difflib.get_close_matches(unknown, accepted, n=2)
    guess = f"did you mean {' or '.join(near)}? " if near else ""
    return f"unknown key {unknown!r} ({guess}accepted: {', '.join(accepted)})"


def validate_values(schema: dict[str, Any], doc: Any, what: str) -> None:
    """``doc`` against ``schema``; the first problem (unknown keys first) as one ``InvalidInput`` line."""
    errors = sorted(Draft202012Validator(schema).iter_errors(doc),
                    key=lambda e: (e.validator != "additionalProperties", [str(p) for p in e.absolute_path]))
    if not errors:
        return
    error = errors[0]
    if error.validator == "additionalProperties" and isinstance(doc, Mapping):
        accepted = list(schema["properties"])
        unknown = sorted((k for k in doc if k not in accepted), key=str)[0]
        raise InvalidInput(f"{what}: {unknown_key_message(str(unknown), accepted)}")
    raise InvalidInput(f"{what}: {_where(error)}: {_innermost(error).message}")


def typed_values(cls: type, doc: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The knobs ``doc`` sets (it validated against ``config_schema(cls)``), as ``cls`` takes them."""
    hints = {f.name: hint for f, hint in knob_fields(cls)}
    out: dict[str, Any] = {}
    for name, value in doc.items():
        if name not in hints:
            continue
        kind, many, _ = unwrap_hint(hints[name])
        items = [_typed(v, kind, f"{what}: {name}") for v in value] if many and value is not None else None
        out[name] = tuple(items) if items is not None else _typed(value, kind, f"{what}: {name}")
    return out


def _typed(value: Any, kind: Any, where: str) -> Any:
    base = _base(kind)
    if value is None or base in (bool, str):
        return value
    if base is Path:
        return Path(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where}: {value} is not a finite number")
    return int(value) if base is int else float(value)
