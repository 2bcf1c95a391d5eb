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

from harness import __version__, commands
from harness.commands._signals import StopSignals
from harness.errors import InfkitError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infkit",
        description="Reproducible LLM inference-optimization experiments.",
    )
    parser.add_argument("--version", action="version", version=f"infkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
