"""Command-line front end: parse → config → call one function → print.

Each subcommand lives in ``harness/commands/<name>.py`` and exposes
``register(subparsers)``; the parser sets ``func`` to a callable that takes the
parsed namespace and returns an exit code. Adding a command is adding a file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType

from harness import __version__, commands
from harness.commands._signals import StopSignals
from harness.errors import InfkitError


def _command_modules() -> list[ModuleType]:
    return [importlib.import_module(f"{commands.__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name)
            if not info.name.startswith("_")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infkit",
        description="Reproducible LLM inference-optimization experiments.",
    )
    parser.add_argument("--version", action="version", version=f"infkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        module.register(sub)
    return parser


def expand_argv(argv: list[str]) -> list[str]:
    """The command line as parsed: a command may fill in what a file it is given names (``expand_argv``)."""
    for module in _command_modules():
        argv = getattr(module, "expand_argv", lambda a: a)(argv)
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = expand_argv(argv)
    except InfkitError as exc:
        print(f"infkit {argv[0]}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    stop = StopSignals(args.command).install()
    try:
        return int(args.func(args) or 0)
    except InfkitError as exc:
        print(f"infkit {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"infkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    finally:
        stop.uninstall()


if __name__ == "__main__":
    raise SystemExit(main())
