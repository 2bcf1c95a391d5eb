"""Have the pinned engines' own code parse the exact command lines the kit would launch; run by the engine's python.

Standalone on purpose (it runs with the vLLM 0.11.0 / SGLang 0.5.5 source trees on its path, not infkit's venv).
Reads a JSON list of ``{"name", "backend", "argv", "refused"}`` on stdin and prints one JSON list of
``{"name", "ok", "error"}``: ``ok`` means the engine accepted the command line (vLLM: ``make_arg_parser`` +
``validate_parsed_serve_args``, and for a speculative config ``EngineArgs``'s V1 oracle and
``create_speculative_config`` on the model's real config; SGLang: ``ServerArgs``'s parser). No device is used:
vLLM's platform is set to its CPU platform only so that config defaults resolve.

Usage: python engine_parse.py vllm|sglang < entries.json
"""

from __future__ import annotations

import argparse
import json
import sys

VLLM_ENTRY = ("-m", "vllm.entrypoints.openai.api_server")
SGLANG_ENTRY = ("-m", "sglang.launch_server")


class Refused(Exception):
    """The engine's parser rejected the command line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise Refused(message)


def vllm_checker():
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # defaults only; nothing runs
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils import FlexibleArgumentParser

    class Flexible(FlexibleArgumentParser):
        def error(self, message: str):  # type: ignore[override]
            raise Refused(message)

    parser = make_arg_parser(Flexible())

    def check(argv: list[str]) -> None:
        args = parser.parse_args(argv)
        validate_parsed_serve_args(args)
        if args.speculative_config:
            engine = AsyncEngineArgs.from_cli_args(args)
            model = engine.create_model_config()
            engine._is_v1_supported_oracle(model)
            engine.create_speculative_config(model, ParallelConfig(), True, False)
    return check, VLLM_ENTRY


def sglang_checker():
    from sglang.srt.server_args import ServerArgs

    parser = Parser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args, SGLANG_ENTRY


def main(engine: str) -> int:
    check, entry = vllm_checker() if engine == "vllm" else sglang_checker()
    out = []
    for item in json.load(sys.stdin):
        argv = item["argv"]
        if tuple(argv[1:3]) != entry:
            out.append({"name": item["name"], "ok": False, "error": f"not a {engine} server command: {argv[:3]}"})
            continue
        try:
            check(list(argv[3:]))
            out.append({"name": item["name"], "ok": True, "error": None})
        except (Refused, NotImplementedError, ValueError, TypeError, SystemExit) as exc:
            out.append({"name": item["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
    print("INFKIT_ENGINE_PARSE " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
