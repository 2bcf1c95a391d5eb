"""Command-line options derived from a frozen config dataclass: one option per field, defaults from the class."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any


def _base_type(hint: Any) -> tuple[Any, bool]:
    """(element type, is_sequence) of a field annotation, with Optional unwrapped."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _base_type(args[0])
    if origin in (tuple, list):
        return typing.get_args(hint)[0], True
    return hint, False


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    helps = getattr(cls, "HELP", {})
    for f in dataclasses.fields(cls):
        option = "--" + f.name.replace("_", "-")
        kind, many = _base_type(hints[f.name])
        default = f.default
        shown = " ".join(map(str, default)) if many else default
        text = f"{helps[f.name]} " if f.name in helps else ""
        if kind is bool:
            parser.add_argument(option, dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                                help=f"{text}(default: {default})")
        else:
            parser.add_argument(option, dest=f.name, type=kind, nargs="+" if many else None, default=default,
                                metavar=f.name.split("_")[-1].upper(), help=f"{text}(default: {shown})")


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name)
        values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)
