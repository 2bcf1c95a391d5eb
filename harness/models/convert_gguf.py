"""GGUF → safetensors checkpoint + tokenizer; run with the model converter venv's python.

Standalone on purpose: the converter venv (``harness.models.prepare.CONVERTER_ENV``) has torch,
transformers and the GGUF but not infkit; ``prepare`` then normalises what this writes so both
transformers lines read it alike (``checkpoint_format``). Transformers dequantizes the GGUF on
load (kept as bfloat16, the dtype vLLM serves on CPU); clearing the quantizer and the config's
``quantization_config`` makes ``save_pretrained`` write a plain checkpoint that vLLM serves.

Usage: python convert_gguf.py --gguf FILE --out DIR
"""

from __future__ import annotations

import argparse
import os
import sys

# Never reach for a model hub: everything comes from the local GGUF.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def convert(gguf_path: str, out_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    folder, name = os.path.split(os.path.abspath(gguf_path))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    convert(args.gguf, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
