"""What one transformers install reads from checkpoint directories, printed as one JSON line each.

Standalone on purpose: it runs with the python of a venv that has transformers but not infkit
(the serving venv's 5.x, the engines' 4.57.1 in ``harness.models.readers.TRANSFORMERS4``), and
needs no torch: ``AutoTokenizer`` and ``AutoConfig`` only. It prints the tokenizer's ids for a
given text and the config values an engine serves with, read the way that transformers line
exposes them (4.x: top-level ``rope_theta`` / ``rope_scaling``; 5.x: ``rope_parameters``). A
checkpoint this line cannot read prints ``{"error": ...}``.

Usage: python read_checkpoint.py TEXT DIR [DIR ...]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"

CONFIG_FIELDS = ("model_type", "architectures", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "head_dim", "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings",
                 "rms_norm_eps", "tie_word_embeddings")
SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")


def rope(config: Any, major: int) -> dict[str, Any]:
    """The RoPE base, type and scaling parameters this transformers line hands a model."""
    if major >= 5:
        params = dict(getattr(config, "rope_parameters", None) or {})
        theta = params.pop("rope_theta", None)
    else:
        theta = getattr(config, "rope_theta", None)
        params = dict(getattr(config, "rope_scaling", None) or {})
    kind = params.pop("rope_type", params.pop("type", "default"))
    return {"rope_theta": theta, "rope_type": kind, "rope_scaling": params}


def read(directory: str, text: str) -> dict[str, Any]:
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    major = int(transformers.__version__.split(".")[0])
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = AutoConfig.from_pretrained(directory)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return {
        "transformers": transformers.__version__,
        "tokenizer_class": type(tokenizer).__name__,
        "ids": list(tokenizer(text)["input_ids"]),
        "special_tokens": {name: getattr(tokenizer, name, None) for name in SPECIAL_TOKENS},
        "tokenizer_size": len(tokenizer),
        "chat_template": tokenizer.chat_template,
        "config": {**{name: getattr(config, name, None) for name in CONFIG_FIELDS}, **rope(config, major),
                   "dtype": None if dtype is None else str(dtype).removeprefix("torch.")},
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for directory in argv[1:]:
        try:
            out = read(directory, argv[0])
        except Exception as exc:  # the reader's own message is the finding
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
