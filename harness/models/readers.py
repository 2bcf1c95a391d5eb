"""Does a checkpoint read the same with the GPU engines' transformers as on the CPU path?

vLLM 0.11.0 and SGLang 0.5.5 read a checkpoint's tokenizer and config with transformers 4.x
(SGLang pins 4.57.1); the CPU serving venv reads it with transformers 5.x. ``check_checkpoint``
runs ``read_checkpoint.py`` with both and lists every difference in what they read: the token ids
of a fixed text, the special tokens, the chat template and the config values an engine serves
with (RoPE base and scaling, layers, heads, KV heads, head size, context length, dtype). An empty
list means both lines serve the same model. The 4.57.1 reader lives in a small venv of its own
(``TRANSFORMERS4``: pure Python, no torch), built and cached like the serving venv;
``$INFKIT_TRANSFORMERS4_PYTHON`` names another python to use instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing
from harness.runtime.serving_env import Progress, ServingEnvSpec, ensure_serving_env

READER = Path(__file__).with_name("read_checkpoint.py")
PYTHON_ENV_VAR = "INFKIT_TRANSFORMERS4_PYTHON"
# Special tokens, a chat turn, digits, accents and a non-Latin script: the pieces tokenizers split differently.
TEXT = "<|im_start|>user\nSmolLM2's RoPE base is 100000 (θ); café ≠ cafe, 東京 — tabs\tand  spaces.<|im_end|>\n"

TRANSFORMERS4 = ServingEnvSpec(
    name="transformers4",
    install=("transformers==4.57.1", "tokenizers==0.22.1"),
    remove=(),
    extra=(),
    no_deps=(),
    smoke_imports=("transformers", "tokenizers"),
    smoke_present=(),
)


def engine_reader_python(progress: Progress = print) -> Path:
    """The python whose transformers is the engines' (4.57.1): ``$INFKIT_TRANSFORMERS4_PYTHON``, else the cached
    ``TRANSFORMERS4`` venv (built on first use)."""
    named = os.environ.get(PYTHON_ENV_VAR)
    if named:
        return Path(named)
    return ensure_serving_env(TRANSFORMERS4, progress=progress).python


def read_with(python: Path, directories: list[Path], text: str = TEXT) -> list[dict[str, Any]]:
    """What the transformers of ``python`` reads from each of ``directories`` (``{"error": ...}`` where it cannot);
    one process for all of them."""
    proc = subprocess.run([str(python), str(READER), text, *map(str, directories)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or len(lines) != len(directories):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise CapabilityMissing(f"reading checkpoints with {python} failed (exit {proc.returncode}):\n{tail}")
    return [json.loads(line) for line in lines]


def differences(engine: dict[str, Any], cpu: dict[str, Any]) -> list[str]:
    """Each field the two reads disagree on, as ``field: engine value != cpu value``."""
    if "error" in engine or "error" in cpu:
        return [f"{label} transformers cannot read it: {read['error']}"
                for label, read in (("engine", engine), ("cpu", cpu)) if "error" in read]
    pairs = [(name, engine[name], cpu[name]) for name in ("ids", "special_tokens", "tokenizer_size", "chat_template")]
    pairs += [(f"config.{name}", value, cpu["config"].get(name)) for name, value in engine["config"].items()]
    return [f"{name}: {a!r} != {b!r}" for name, a, b in pairs if a != b]


def check_checkpoints(directories: list[Path], *, engine_python: Path, cpu_python: Path, text: str = TEXT
                      ) -> dict[Path, tuple[list[str], dict[str, Any], dict[str, Any]]]:
    """For each directory: the differences between what the engines' transformers (``engine_python``) and the CPU
    path's (``cpu_python``) read from it (empty: identical), and both reads."""
    engine = read_with(engine_python, directories, text)
    cpu = read_with(cpu_python, directories, text)
    return {d: (differences(e, c), e, c) for d, e, c in zip(directories, engine, cpu, strict=True)}
