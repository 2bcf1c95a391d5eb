"""Options and printing shared by ``infkit mech`` and ``infkit cuda``: where a run goes, whether it is signed."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.knobs import add_protocol_argument
from harness.rundir.directory import Finished


def add_run_arguments(p: argparse.ArgumentParser, *, default_out: str) -> None:
    """``--out``, ``--sign/--no-sign`` and Make's variables; not config fields, since they change no result (the
    first two in the protocol group ``--help-all`` lists)."""
    add_protocol_argument(p, "--out", type=Path, default=Path(default_out),
                          help=f"output root (default: {default_out})")
    add_protocol_argument(p, "--sign", action=argparse.BooleanOptionalAction, default=True,
                          help="sign the run directory into manifests/ under the current directory (default: sign)")
    p.add_argument("--make-vars", default="", help=argparse.SUPPRESS)  # Make's MAKEOVERRIDES (mk/mech.mk, mk/cuda.mk)


def relative(path: Path) -> Path:
    """``path`` relative to the current directory when it lies inside it (shorter to read and to paste)."""
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_absolute() and path.is_relative_to(cwd) else path


def print_finished(done: Finished, result: Path) -> None:
    """Where the result and its manifest are, and how to check it."""
    print(f"result: {relative(result)}")
    if done.manifest:
        print(f"manifest: {relative(done.manifest)}")
        print(f"check it: infkit audit {relative(done.manifest)}")
