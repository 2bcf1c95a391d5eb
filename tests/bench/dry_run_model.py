"""A prepared-model stand-in for dry runs: SmolLM2's config.json and a one-tensor safetensors checkpoint."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from harness.models import PreparedModel

SMOLLM2_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                  "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                  "num_hidden_layers": 30, "vocab_size": 49152, "max_position_embeddings": 8192}


def write_model(root: Path, name: str = "smollm2-135m") -> PreparedModel:
    path = root / "models" / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    return PreparedModel(key=name, name=name, path=path, gguf_sha256="sha256:" + "0" * 64,
                         checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)
