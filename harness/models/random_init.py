"""A checkpoint with random weights from a config, reproducibly; run with the serving venv's python.

Standalone on purpose (the serving venv has torch and transformers but not infkit). The
weights come from transformers' own initialisation of the architecture in ``config.json``
under ``torch.manual_seed(seed)``, saved as bfloat16 safetensors: the same seed, config and
torch give the same bytes, whose sha256 the preparer records. Fine for throughput and
scaling measurements; the outputs are meaningless text.

Usage: python random_init.py --dir DIR --seed N   (DIR holds config.json; weights are written there)
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def init(directory: str, seed: int) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(directory)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args(argv)
    init(args.dir, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
