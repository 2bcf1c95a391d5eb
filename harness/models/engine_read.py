"""Before a GPU engine serves a user's own checkpoint: does the engines' transformers 4.x read it as written?

The kit's own checkpoints are normalised as they are written (``checkpoint_format``); a user's directory is served
where it lies and never changed. vLLM 0.11.0 and SGLang 0.5.5 read it with transformers 4.x, which misreads two
spellings transformers 5.x writes: a RoPE base only under ``rope_parameters`` (4.x falls back to its default, 10000
for Llama, and serves another model) and ``tokenizer_class: TokenizersBackend`` (4.x has no such class: the engine
fails to start). ``check_user_checkpoint`` names both from the files themselves, and, where a 4.x python is at hand
(``$INFKIT_TRANSFORMERS4_PYTHON``, or the cached venv ``.ci/setup-transformers4.sh`` builds; never built here), reads
the directory with it and compares the RoPE base it gets with the one the files declare. A checkpoint either finds
misread is refused with the differences named; where no 4.x python is at hand, the record says the read did not run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing, InvalidInput
from harness.models.checkpoint_format import TOKENIZER_CLASSES
from harness.models.readers import PYTHON_ENV_VAR, TRANSFORMERS4, read_with
from harness.runtime.serving_env import find_serving_env

NOT_RUN = (f"the transformers 4.x read did not run: no 4.x python here (set {PYTHON_ENV_VAR}, or run "
           ".ci/setup-transformers4.sh)")


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def declared_rope_theta(config: dict[str, Any]) -> float | None:
    """The RoPE base the files declare: the top-level ``rope_theta`` (4.x's spelling), else 5.x's
    ``rope_parameters``."""
    params = config.get("rope_parameters")
    theta = config.get("rope_theta", params.get("rope_theta") if isinstance(params, dict) else None)
    return float(theta) if isinstance(theta, (int, float)) else None


def misread_in_files(directory: Path) -> list[str]:
    """What transformers 4.x would misread, from the files alone."""
    config = _json(directory / "config.json")
    found = []
    params = config.get("rope_parameters")
    if "rope_theta" not in config and isinstance(params, dict) and "rope_theta" in params:
        found.append(f"config.json declares rope_theta {params['rope_theta']:g} only under rope_parameters, which "
                     "transformers 4.x ignores (it serves its own default RoPE base)")
    name = _json(directory / "tokenizer_config.json").get("tokenizer_class")
    if name in TOKENIZER_CLASSES:
        found.append(f"tokenizer_config.json names tokenizer_class {name}, a class transformers 4.x does not have "
                     f"({TOKENIZER_CLASSES[name]} reads the same tokenizer.json)")
    return found


def engine_python() -> Path | None:
    """A python with the engines' transformers 4.x: ``$INFKIT_TRANSFORMERS4_PYTHON``, else the cached venv (None
    where neither is here; it is never built on a serving path)."""
    named = os.environ.get(PYTHON_ENV_VAR)
    if named:
        return Path(named) if Path(named).is_file() else None
    env = find_serving_env(TRANSFORMERS4)
    return env.python if env else None


def misread_by_engine(directory: Path, python: Path) -> tuple[list[str], dict[str, Any]]:
    """What the 4.x python reads differently from the files (its error, or another RoPE base), and its read."""
    try:
        (read,) = read_with(python, [directory])
    except CapabilityMissing as exc:
        return [f"the transformers 4.x read failed: {str(exc).splitlines()[0]}"], {}
    if "error" in read:
        return [f"transformers {read.get('transformers', '4.x')} cannot read it: {read['error']}"], read
    declared, served = declared_rope_theta(_json(directory / "config.json")), read["config"].get("rope_theta")
    if declared is not None and served != declared:
        return [f"transformers {read['transformers']} reads rope_theta {served} where the files declare "
                f"{declared:g}"], read
    return [], read


def check_user_checkpoint(directory: Path) -> dict[str, Any]:
    """run.json's record of the check before a GPU engine serves ``directory``; a checkpoint the engine would
    misread is an input error naming each difference (its files are left as they are)."""
    found = misread_in_files(directory)
    python = engine_python()
    record: dict[str, Any] = {"directory": str(directory), "from_files": found, "engine_python": None,
                              "engine_read": NOT_RUN}
    if python is not None:
        engine, read = misread_by_engine(directory, python)
        found += engine
        record.update(engine_python=str(python), engine_read={
            "transformers": read.get("transformers"), "tokenizer_class": read.get("tokenizer_class"),
            "rope_theta": (read.get("config") or {}).get("rope_theta"), "differences": engine})
    if found:
        raise InvalidInput(f"checkpoint {directory}: the GPU engines' transformers 4.x would misread it: "
                           + "; ".join(found),
                           hint="save it with rope_theta at the top level of config.json and tokenizer_class "
                                "PreTrainedTokenizerFast (the kit does not change your files), or serve it on the "
                                "CPU default")
    return record
