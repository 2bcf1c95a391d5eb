"""Checkpoint files that transformers 4.x (the pinned GPU engines') and 5.x (the CPU serving venv's) read alike.

transformers 5.x writes two things 4.x misreads:

- ``config.json`` carries the RoPE settings only as ``rope_parameters``
  (``{"rope_type": "default", "rope_theta": 100000.0}``); 4.x ignores that key and falls back to
  its own default ``rope_theta`` (10000 for Llama), so an engine serves another RoPE base. The
  normalised config keeps ``rope_parameters`` (what 5.x reads) and adds the top-level
  ``rope_theta`` and ``rope_scaling`` 4.x reads (``None`` for the default RoPE, else the same
  parameters without ``rope_theta``).
- ``tokenizer_config.json`` names ``"tokenizer_class": "TokenizersBackend"``, a class 4.x does not
  have ("Tokenizer class TokenizersBackend does not exist"); both lines load
  ``PreTrainedTokenizerFast`` straight from ``tokenizer.json``. The keys that only describe the
  call that loaded it (``is_local``, ``local_files_only``) are dropped.

Every writer (``prepare``, ``derived``, ``draft``) passes its checkpoint through
``normalise_checkpoint`` before hashing it (``stamp.write_stamp``); ``harness.models.readers``
checks the result with both transformers lines. A config that already has a top-level
``rope_theta`` (a 4.x-written one) is left as it is; nested per-layer-type ``rope_parameters`` are
left to that check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_text

FAST_TOKENIZER = "PreTrainedTokenizerFast"
# transformers 5.x class names 4.x lacks, and the 4.x class that reads the same tokenizer.json
TOKENIZER_CLASSES = {"TokenizersBackend": FAST_TOKENIZER}
LOAD_CALL_KEYS = ("is_local", "local_files_only")
DEFAULT_ROPE = "default"


def normalise_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the top-level ``rope_theta`` / ``rope_scaling`` 4.x reads, taken from 5.x's
    ``rope_parameters``."""
    params = config.get("rope_parameters")
    if "rope_theta" in config or not isinstance(params, dict) or "rope_theta" not in params:
        return dict(config)
    scaling: dict[str, Any] | None = {k: v for k, v in params.items() if k != "rope_theta"}
    if scaling == {"rope_type": DEFAULT_ROPE} or not scaling:
        scaling = None  # 4.x's spelling of the default RoPE
    return {**config, "rope_theta": params["rope_theta"], "rope_scaling": scaling}


def normalise_tokenizer_config(tokenizer_config: dict[str, Any]) -> dict[str, Any]:
    """``tokenizer_config`` naming a tokenizer class both transformers lines have."""
    out = {k: v for k, v in tokenizer_config.items() if k not in LOAD_CALL_KEYS}
    name = out.get("tokenizer_class")
    if name in TOKENIZER_CLASSES:
        out["tokenizer_class"] = TOKENIZER_CLASSES[name]
    return out


def _rewrite(path: Path, normalise: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    if not path.is_file():
        return False
    before = json.loads(path.read_text(encoding="utf-8"))
    after = normalise(before)
    if after == before:
        return False
    atomic_write_text(path, json.dumps(after, indent=2, sort_keys=True) + "\n")
    return True


def normalise_checkpoint(directory: Path) -> list[str]:
    """Rewrite ``directory``'s config.json and tokenizer_config.json in place where 4.x would misread them; the
    names of the files rewritten."""
    return [name for name, normalise in (("config.json", normalise_config),
                                         ("tokenizer_config.json", normalise_tokenizer_config))
            if _rewrite(directory / name, normalise)]
