"""A tiny Hugging Face-format checkpoint of another architecture than SmolLM2's Llama (Qwen2ForCausalLM), with its
own small BPE tokenizer and random weights, built with the serving venv's transformers: it serves in seconds on 2
cores, so a real bench can run on a model the user brings."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.models import random_init
from tests.tiny_tokenizer import train_tokenizer

EOS = "<|endoftext|>"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
CONTEXT_TOKENS = 1024  # max_position_embeddings: shorter than the benches' default --max-model-len of 4096


def qwen2_config(vocab_size: int) -> dict:
    # head_dim 64: a size the CPU attention backend has kernels for
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128,
            "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": CONTEXT_TOKENS, "max_window_layers": 2, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "tie_word_embeddings": True, "vocab_size": vocab_size, "bos_token_id": 0,
            "eos_token_id": 0, "hidden_act": "silu", "torch_dtype": "bfloat16", "use_sliding_window": False}


def build_tiny_qwen2(directory: Path, python: Path, seed: int = 0) -> Path:
    """config.json, tokenizer.json (+ its config with a chat template) and seeded random bf16 weights."""
    train_tokenizer(directory)
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    assert vocab[EOS] == 0  # the trainer's first special token
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "bos_token": EOS, "pad_token": EOS,
        "model_max_length": CONTEXT_TOKENS, "chat_template": CHAT_TEMPLATE}, indent=1))
    (directory / "config.json").write_text(json.dumps(qwen2_config(len(vocab)), indent=1))
    subprocess.run([str(python), random_init.__file__, "--dir", str(directory), "--seed", str(seed)], check=True,
                   capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return directory
