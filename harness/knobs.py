"""Configs are frozen dataclasses; their fields are the command line (and the Make variables).

One derivation for benches, mechanisms and CUDA experiments: every field becomes
``--field-name``; its ``help`` and constraints live in the field's metadata, set
with :func:`knob`. Values are parsed here (not by argparse) so a bad value gives a
one-line ``InvalidInput`` naming the flag. Sequences take ``--xs 1 2 4`` or
``--xs 1,2,4``. ``check_config`` applies the declared constraints to any config
instance, so a spec's defaults are held to the same rules as a user's flags. The same
declarations make the JSON Schema of a bench's run files (``harness.contract.knobschema``).

Every integer knob is bounded above, so a 61-digit value never reaches the work: by its own
``max`` where it declares one, else by ``int_bound`` (``SEED_MAX`` for seeds, which results and
numpy hold as signed 64-bit integers; ``BYTES_MAX`` for byte sizes; ``COUNT_MAX`` for every
other count, length or size, beyond what a run on one machine can honour). A list knob whose
default is not empty cannot be set empty (``--max-num-seqs-values ''``): an empty list would run nothing; nor can
one whose default is empty (``--dtypes ''`` would silently mean the default), unless it declares ``empty``. An
optional knob with choices refuses an empty value (``--dtype ''``) for the same reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import InvalidInput

UNSET = object()  # argparse default: the field keeps the dataclass default
COUNT_MAX = 1_000_000  # requests, repeats, resamples, tokens, blocks, passes, ...: what one machine can run
SEED_MAX = 2**63 - 1  # a signed 64-bit integer: what the result schema, JSON readers and numpy all hold
BYTES_MAX = 2**50  # 1 PiB
METAVARS = {int: "N", float: "X", str: "TEXT", Path: "PATH"}


Group = Literal["question", "protocol"]


def knob(default: Any, help: str, *, min: float | None = None, max: float | None = None,  # noqa: A002
         choices: tuple[Any, ...] | None = None, cli: bool = True, empty: bool = False,
         cites: str | None = None, group: Group = "question", flag: str | None = None) -> Any:
    """A config field with its help text and the constraints ``check_config`` enforces.

    ``group``: ``question`` knobs change what is asked (sizes, model, servers, repeats, margin, a bench's own
    workload and arms) and ``--help`` lists them; ``protocol`` knobs say how it is measured or where it runs
    (timeouts, resamples, placement, signing) and only ``--help-all`` lists them. Both parse alike. ``flag``: the
    option's name where it is not the field's (``workload_path`` as ``--workload``). ``default=MISSING``: a required
    option.

    ``empty``: a list knob with a non-empty default may be set empty (it switches a family of arms off);
    otherwise an empty value is refused, since nothing would run. ``cites``: the field names a signed manifest of
    that semantic id (a path, or ``latest``/``none``), audited before any setup (``cited_paths``).
    """
    meta = {"help": help, "min": min, "max": max, "choices": choices, "cli": cli, "empty": empty, "cites": cites,
            "group": group, "flag": flag}
    if isinstance(default, (list, dict, set)):
        raise TypeError("knob defaults must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata=meta)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def cli_name(f: dataclasses.Field) -> str:
    """The option name of a field, without the dashes' form: its ``flag`` metadata, else the field's name."""
    return f.metadata.get("flag") or f.name


def _unwrap(hint: Any) -> tuple[Any, bool, bool]:
    """(element type, is_sequence, is_optional) of a field annotation."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner, many, _ = _unwrap(args[0])
        return inner, many, len(args) < len(typing.get_args(hint))
    if origin in (tuple, list):
        return typing.get_args(hint)[0], True, False
    return hint, False, False


def _choices_of(kind: Any, meta: typing.Mapping[str, Any]) -> tuple[Any, ...] | None:
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)
    return meta.get("choices")


def parse_value(text: str, kind: Any, name: str) -> Any:
    """One command-line word as ``kind`` (int, float, str, Path, bool, Literal[...])."""
    base = str if typing.get_origin(kind) is Literal else kind
    try:
        if base is bool:
            low = text.lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(text)
            return low in ("1", "true", "yes", "on")
        value = base(text)
    except (ValueError, TypeError):
        raise InvalidInput(f"{flag(name)}: cannot read {text!r} as {getattr(base, '__name__', base)}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{flag(name)}: {text!r} is not a finite number")
    return value


def _field_types(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init and f.metadata.get("cli", True)]


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


class _HelpAll(argparse.Action):
    """``--help-all``: the help with the protocol knobs ``--help`` leaves out."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        for action in parser._actions:
            action.help = getattr(action, "protocol_help", action.help)
        parser.print_help()
        parser.exit()


PROTOCOL_TITLE = "protocol (how it is measured and where it runs; shown by --help-all)"


def protocol_group(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The group of options only ``--help-all`` lists; the first call adds ``--help-all`` and the group."""
    for group in parser._action_groups:
        if group.title == PROTOCOL_TITLE:
            return group
    parser.add_argument("--help-all", action=_HelpAll, help="show this help with the protocol knobs too")
    return parser.add_argument_group(PROTOCOL_TITLE)


def _hide(group: argparse._ArgumentGroup) -> None:
    """Leave the group's options out of ``--help`` (``--help-all`` puts their help back)."""
    for action in group._group_actions:
        if action.help is not argparse.SUPPRESS:
            action.protocol_help, action.help = action.help, argparse.SUPPRESS  # type: ignore[attr-defined]


def add_protocol_argument(parser: argparse.ArgumentParser, *names: str, **kwargs: Any) -> argparse.Action:
    """An option that is not a config field (where a run goes, whether it is signed) in the protocol group."""
    group = protocol_group(parser)
    action = group.add_argument(*names, **kwargs)
    _hide(group)
    return action


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per field of ``cls``; help and default from the field. Protocol knobs (``knob(group=...)``) go
    to a group of their own that only ``--help-all`` shows."""
    fields = _field_types(cls)
    protocol = protocol_group(parser) if any(f.metadata.get("group") == "protocol" for f, _ in fields) else None
    for f, hint in fields:
        _add_knob(protocol if protocol and f.metadata.get("group") == "protocol" else parser, f, hint)
    if protocol:
        _hide(protocol)


def _add_knob(parser: argparse.ArgumentParser | argparse._ArgumentGroup, f: dataclasses.Field, hint: Any) -> None:
    """One option for one field."""
    kind, many, _ = _unwrap(hint)
    choices = _choices_of(kind, f.metadata)
    text = f.metadata.get("help", "")
    if choices:
        text += f" (one of: {', '.join(map(str, choices))})"
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    if "default" not in text and not required:
        text = f"{text} (default: {_shown(f.default)})".strip()
    if kind is bool and not many:
        parser.add_argument(flag(cli_name(f)), dest=f.name, action=argparse.BooleanOptionalAction, default=UNSET,
                            help=text)
    else:
        # a list knob given twice takes both (``--server a=URL --server b=URL``)
        parser.add_argument(flag(cli_name(f)), dest=f.name, nargs="+" if many else None,
                            default=None if many else UNSET, required=required,
                            action="extend" if many else "store", metavar=METAVARS.get(kind, "VALUE"),
                            help=text.replace("%", "%%"))


def values_from_args(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields the user set on the command line, parsed (unset fields are absent)."""
    values: dict[str, Any] = {}
    for f, hint in _field_types(cls):
        raw = getattr(args, f.name, UNSET)
        kind, many, optional = _unwrap(hint)
        if raw is UNSET or (many and raw is None):
            continue
        if isinstance(raw, bool):
            values[f.name] = raw
        elif many:
            words = [w for item in raw for w in str(item).split(",") if w.strip()]
            if not words and not f.metadata.get("empty"):  # an empty list runs nothing, or means the default
                raise InvalidInput(f"{flag(cli_name(f))}: needs at least one value (leave the flag out for the "
                                   f"default: {_shown(f.default)})")
            values[f.name] = tuple(parse_value(w.strip(), kind, cli_name(f)) for w in words)
        elif optional and not raw.strip() and _choices_of(kind, f.metadata):
            raise InvalidInput(f"{flag(cli_name(f))}: an empty value is not one of "
                               f"{', '.join(map(str, _choices_of(kind, f.metadata) or ()))} (leave the flag out for "
                               "the default)")
        elif optional and raw.strip().lower() in ("", "none"):
            values[f.name] = None
        else:
            values[f.name] = parse_value(raw, kind, cli_name(f))
    return values


def make_vars(cls: type, overrides: str) -> dict[str, Any]:
    """Fields set as Make command-line variables (GNU make's ``MAKEOVERRIDES``: ``REPEATS=5 RATES=1,2``).

    A variable is a field when its lower-cased name is one (``SLO_TTFT_P99_MS`` → ``slo_ttft_p99_ms``);
    other variables belong to Make and are ignored. An empty value leaves the default.
    """
    words, word, escaped = [], "", False
    for ch in overrides:
        if escaped:
            word, escaped = word + ch, False
        elif ch == "\\":
            escaped = True
        elif ch.isspace():
            words, word = words + [word] if word else words, ""
        else:
            word += ch
    words += [word] if word else []
    fields = {f.name: (f, hint) for f, hint in _field_types(cls)}
    values: dict[str, Any] = {}
    for item in words:
        name, sep, value = item.partition("=")
        key = name.lower()
        if not sep or key not in fields or not value.strip():
            continue
        f, hint = fields[key]
        kind, many, optional = _unwrap(hint)
        if many:
            values[key] = tuple(parse_value(w.strip(), kind, key) for w in value.split(",") if w.strip())
        else:
            values[key] = parse_value(value, kind, key)
    return values


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def int_bound(f: dataclasses.Field, kind: Any) -> float | None:
    """The upper bound of an integer field: its declared ``max``, else the default for its kind of value."""
    if kind is not int or f.metadata.get("max") is not None:
        return f.metadata.get("max")
    if f.name == "seed" or f.name.endswith("_seed"):
        return SEED_MAX
    return BYTES_MAX if f.name.endswith("_bytes") else COUNT_MAX


def check_config(cfg: Any) -> None:
    """Apply every field's declared constraints; the first violation raises ``InvalidInput`` naming the flag."""
    for f, hint in _field_types(type(cfg)):
        kind, many, _ = _unwrap(hint)
        value = getattr(cfg, f.name)
        if many and value is not None and not value and f.default not in ((), None, dataclasses.MISSING) \
                and not f.metadata.get("empty"):
            raise InvalidInput(f"{flag(cli_name(f))}: needs at least one value (default: {_shown(f.default)})")
        items = value if many and value is not None else (value,)
        choices = _choices_of(kind, f.metadata)
        for item in items:
            if item is None:
                continue
            if isinstance(item, float) and not math.isfinite(item):
                raise InvalidInput(f"{flag(cli_name(f))}: {item} is not a finite number")
            if choices and item not in choices:
                raise InvalidInput(f"{flag(cli_name(f))}: {item!r} is not one of {', '.join(map(str, choices))}")
            lo, hi = f.metadata.get("min"), int_bound(f, kind)
            if lo is not None and item < lo:
                raise InvalidInput(f"{flag(cli_name(f))} must be at least {_bound(lo)}, got {item}")
            if hi is not None and item > hi:
                shown = str(item) if len(str(item)) <= 24 else f"{str(item)[:12]}... ({len(str(item))} digits)"
                raise InvalidInput(f"{flag(cli_name(f))} must be at most {_bound(hi)}, got {shown}")


def config_from_args(cls: type, args: argparse.Namespace, *, make_overrides: str = "",
                     base: typing.Mapping[str, Any] | None = None, **overrides: Any) -> Any:
    """An instance of ``cls`` from ``base`` (a run file's values), then Make variables, then the parsed command line
    (which wins), checked before any work."""
    try:  # a KnobConfig checks itself as it is made
        return cls(**{**(base or {}), **make_vars(cls, make_overrides), **values_from_args(cls, args), **overrides})
    except TypeError as exc:  # a field without a default was not given
        raise InvalidInput(str(exc)) from None


def cited_paths(cfg: Any) -> list[tuple[str, str, str]]:
    """(flag, manifest path, semantic id) of every ``cites`` knob set to a path (not unset, ``latest`` or ``none``)."""
    return [(flag(cli_name(f)), str(value), f.metadata["cites"]) for f in dataclasses.fields(cfg)
            if f.metadata.get("cites") and (value := getattr(cfg, f.name)) not in (None, "", "latest", "none")]


def json_value(v: Any) -> Any:
    """A knob's value as JSON (paths as strings, tuples as lists)."""
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (tuple, list)):
        return [json_value(x) for x in v]
    return v


def config_dict(cfg: Any) -> dict[str, Any]:
    """A config as JSON-ready values (paths as strings, tuples as lists)."""
    return {f.name: json_value(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


# what the run-file schema (``harness.contract.knobschema``) reads of the declarations: the settable fields with
# their annotations, an annotation as (element type, is_sequence, is_optional), a knob's choices
knob_fields, unwrap_hint, choices_of = _field_types, _unwrap, _choices_of


@dataclass(frozen=True)
class KnobConfig:
    """Base of every plug-in's config (benches, mechanisms, CUDA experiments): ``knob`` fields, checked when an
    instance is made, so a config built in code is held to the same rules as one built from the command line.

    The field constraints (``check_config``, errors naming the flag) apply first, then the config's own
    cross-field ``check``.
    """

    def __post_init__(self) -> None:
        check_config(self)
        self.check()

    def check(self) -> None:
        """Cross-field checks (raise ``InvalidInput``)."""
