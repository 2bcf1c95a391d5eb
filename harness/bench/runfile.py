"""Run files: one YAML document naming a bench and any of its knobs, checked against a schema made from the knobs.

``infkit bench --config run.yaml`` (``make bench CONFIG=run.yaml``) runs the bench the file names
(``bench: "69"``) with the knobs it sets; Make variables, then flags, override the file. Before any setup the
file is validated with ``jsonschema`` against ``run_file_schema(spec)``, generated from the same ``knob``
declarations as the flags (``harness.contract.knobschema``): an unknown key, a value of the wrong type or out of
bounds, a duplicate key, an unknown bench is one line naming it. A run copies the file's bytes into its directory
as ``run.yaml`` (so the manifest signs them); run.json records the copy's digest and which knobs the file, Make and
the command line set (``Origin.record``). ``run_file_text`` writes the run file of a config (``--print-config``),
so any command line becomes a file that runs the same config.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.bench import get_bench
from harness.bench.spec import BenchConfig, BenchSpec
from harness.contract.atomic import atomic_write_bytes
from harness.contract.knobschema import config_schema, typed_values, validate_values
from harness.errors import InvalidInput
from harness.ids import sha256_bytes
from harness.knobs import config_from_args, json_value, knob_fields, make_vars, values_from_args

RUN_FILE = "run.yaml"  # the copy in the run directory
MAX_BYTES = 1 << 20


def run_file_schema(spec: BenchSpec) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a run file of ``spec``: ``bench`` and every knob of its config."""
    bench = {"bench": {"description": f"the bench: {spec.title}", "type": "string", "const": spec.name}}
    return config_schema(spec.config, title=f"infkit run file: {spec.title}", fixed=bench,
                         schema_id=f"urn:infkit:schema:run-file:bench-{spec.name}",
                         description=f"{spec.help} (every key but bench is a knob of `infkit bench {spec.name}`)")


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice (the second would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key_node.value!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _load(path: Path) -> tuple[bytes, Any]:
    try:
        if not path.is_file():
            raise InvalidInput(f"run file {path}: {'not a regular file' if path.exists() else 'no such file'}")
        raw = path.read_bytes()[: MAX_BYTES + 1]
    except OSError as exc:
        raise InvalidInput(f"run file {path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise InvalidInput(f"run file {path}: larger than {MAX_BYTES >> 10} KiB; a run file names a bench and knobs")
    try:
        return raw, yaml.load(raw, Loader=_Loader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        raise InvalidInput(f"run file {path}: YAML: {problem}"
                           + (f" (line {mark.line + 1})" if mark else "")) from None


@dataclass(frozen=True)
class RunFile:
    """A run file as read: its path as given, its bytes, the bench it names and the knobs it sets (typed)."""

    given: Path
    raw: bytes
    bench: str
    values: Mapping[str, Any]

    @property
    def sha256(self) -> str:
        return sha256_bytes(self.raw)


def read_run_file(path: str | Path, spec: BenchSpec | None = None) -> tuple[BenchSpec, RunFile]:
    """The bench a run file names and the file, validated against that bench's schema. With ``spec`` (the
    command named a bench) the file must name the same one."""
    path = Path(path)
    raw, doc = _load(path)
    if not isinstance(doc, dict):
        raise InvalidInput(f"run file {path}: a run file is one YAML mapping (bench: \"69\" and knobs), "
                           f"not {'an empty document' if doc is None else type(doc).__name__}")
    if "bench" not in doc:
        raise InvalidInput(f"run file {path}: no bench key: name the bench (bench: \"69\")")
    name = str(doc["bench"]) if isinstance(doc["bench"], (int, str)) else doc["bench"]
    if spec is None:
        try:
            spec = get_bench(str(name))
        except InvalidInput as exc:
            raise InvalidInput(f"run file {path}: bench: {exc}") from None
    elif name != spec.name:
        raise InvalidInput(f"run file {path} names bench {name}, the command bench {spec.name}",
                           hint=f"infkit bench --config {path} runs the bench the file names")
    doc = {**doc, "bench": name}
    validate_values(run_file_schema(spec), doc, f"run file {path}")
    return spec, RunFile(path, raw, spec.name, typed_values(spec.config, doc, f"run file {path}"))


@dataclass(frozen=True)
class Origin:
    """Where a bench's settings came from: the run file (copied into the run directory) and each set knob's
    source (``run_file``, ``make`` or ``command_line``: the last one that set it)."""

    run_file: RunFile | None = None
    set_by: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What run.json's ``requested`` adds to the config: the run file's copy and digest, and ``set_by``."""
        if self.run_file is None:
            return {"set_by": dict(self.set_by)}
        entry = {"path": RUN_FILE, "given": str(self.run_file.given), "sha256": self.run_file.sha256}
        return {"run_file": entry, "set_by": dict(self.set_by)}

    def copy_into(self, run_dir: Path) -> None:
        """The run file's bytes as they were read, into the run directory (a subject of its manifest)."""
        if self.run_file is not None:
            atomic_write_bytes(run_dir / RUN_FILE, self.run_file.raw)


def bench_settings(spec: BenchSpec, args: argparse.Namespace) -> tuple[BenchConfig, Origin]:
    """The config of a command line: the run file's knobs (``--config``), then Make variables, then flags; and
    where each set knob came from."""
    run_file = read_run_file(args.config, spec)[1] if getattr(args, "config", None) else None
    make = getattr(args, "make_vars", "")
    base = dict(run_file.values) if run_file else {}
    cfg = config_from_args(spec.config, args, make_overrides=make, base=base)
    set_by = {**dict.fromkeys(base, "run_file"), **dict.fromkeys(make_vars(spec.config, make), "make"),
              **dict.fromkeys(values_from_args(spec.config, args), "command_line")}
    return cfg, Origin(run_file, dict(sorted(set_by.items())))


def run_file_text(spec: BenchSpec, cfg: BenchConfig) -> str:
    """The run file of ``cfg``: the bench and every knob's value, each under its help as a comment."""
    lines = [f"# infkit run file: {spec.title} (infkit bench --config FILE; docs/runfiles.md)",
             _yaml_line("bench", spec.name)]
    for f, _ in knob_fields(type(cfg)):
        lines += [f"# {' '.join(f.metadata.get('help', '').split())}", _yaml_line(f.name, getattr(cfg, f.name))]
    return "\n".join(lines) + "\n"


def _yaml_line(key: str, value: Any) -> str:
    """``key: value`` with the value as YAML reads it back (lists in flow style, ambiguous strings quoted)."""
    text = yaml.safe_dump(json_value(value), default_flow_style=True, width=2**31, allow_unicode=True)
    return f"{key}: {text.removesuffix(chr(10)).removesuffix(chr(10) + '...')}"
