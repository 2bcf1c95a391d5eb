"""Models for the CUDA experiments: published configs by name, random or real weights.

A sweep can use a published model's real architecture (its shape in
``harness.models.shapes``) with random weights. ``load_causal_lm`` resolves a
model source: ``tiny`` (a seeded random Llama plus a word-level tokenizer, for
fast tests), a checkpoint directory, or a name prepared by
``harness.models.ensure_model``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cuda.device import import_torch
from harness.errors import CapabilityMissing, InvalidInput
from harness.ids import sha256_file
from harness.models.shapes import LLAMA, ModelShape, get_model

# Same shape family as SmolLM2, small enough for unit tests (not a published model).
RANDOM_TINY = "tiny-llama-random"  # the model name a run on ``tiny`` records: random weights, predicting nothing
TINY = ModelShape("tiny", LLAMA, "gqa", num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                  intermediate_size=128, vocab_size=512, params=180_800, rope_theta=10000.0, rms_norm_eps=1e-5,
                  max_position_embeddings=1024, tie_word_embeddings=True)

TINY_WORDS = (
    "the a of to and in is that for it on with as was be by this are at from or an which have has "
    "model token cache batch request server latency memory kernel attention draft target decode prefill "
    "def return if else for while import print self value list dict key item result step time"
).split()


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    model_ref: dict[str, str]
    tokenizer_ref: dict[str, str]
    source: str


def model_shape(name: str) -> ModelShape:
    """``tiny`` or a published Llama-architecture shape (``InvalidInput`` for any other name)."""
    shape = TINY if name == "tiny" else get_model(name)
    shape.llama_fields()  # refuses a non-Llama architecture before any work
    return shape


def llama_config(name: str, *, attn_implementation: str = "sdpa", **overrides: Any):
    """A ``LlamaConfig`` for ``tiny`` or a published Llama shape, with field overrides (e.g. fewer layers)."""
    from transformers import LlamaConfig

    config = LlamaConfig(**{**model_shape(name).llama_fields(), **overrides})
    config._attn_implementation = attn_implementation
    return config


@contextlib.contextmanager
def seeded(seed: int):
    """Seed torch's RNG for weight init inside the block only (the global state is restored)."""
    torch = import_torch()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def random_llama(name: str, *, seed: int, device: str, dtype: str = "float32", **overrides: Any):
    """A ``LlamaForCausalLM`` with the named architecture and seeded random weights, in eval mode."""
    torch = import_torch()
    from transformers import LlamaForCausalLM

    with seeded(seed):
        model = LlamaForCausalLM(llama_config(name, **overrides))
    return model.to(device=device, dtype=getattr(torch, dtype)).eval()


def tiny_tokenizer():
    """A word-level fast tokenizer over ``TINY_WORDS`` (ids follow the tuple order after specials)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(dict.fromkeys(TINY_WORDS))}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")


def _dir_refs(path: Path, name: str) -> tuple[dict[str, str], dict[str, str]]:
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise InvalidInput(f"{path} holds no *.safetensors checkpoint")
    tok = path / "tokenizer.json"
    model_version = sha256_file(weights[0]) if len(weights) == 1 else "files:" + ",".join(
        sha256_file(w) for w in weights)
    tok_version = sha256_file(tok) if tok.exists() else "unknown: no tokenizer.json"
    return {"name": name, "version": model_version}, {"name": name, "version": tok_version}


def _prepared_model(name: str):
    """The checkpoint ``harness.models`` prepares for ``name`` (reused when already prepared)."""
    try:
        from harness.models import ensure_model, find_model
    except ImportError:
        raise CapabilityMissing(
            f"model {name!r} is not a directory and harness.models is not available in this checkout",
            hint="pass a checkpoint directory (safetensors + tokenizer) or tiny",
        ) from None
    return find_model(name) or ensure_model(name)


def load_causal_lm(source: str, *, device: str, dtype: str = "float32", seed: int = 0) -> LoadedModel:
    """Resolve ``source`` (``tiny``, a checkpoint directory, or a prepared model name) to a model."""
    torch = import_torch()
    if source == "tiny":
        model = random_llama("tiny", seed=seed, device=device, dtype=dtype)
        ref = {"name": RANDOM_TINY, "version": f"config:tiny;init-seed={seed}"}
        return LoadedModel(model, tiny_tokenizer(), ref, {"name": "tiny-wordlevel", "version": "builtin:v1"}, "tiny")
    path = Path(source)
    refs = None
    if not path.is_dir():
        prepared = _prepared_model(source)
        path, refs = Path(prepared.path), (dict(prepared.model_ref), dict(prepared.tokenizer_ref))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_ref, tok_ref = refs or _dir_refs(path, path.name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    return LoadedModel(model, AutoTokenizer.from_pretrained(path), model_ref, tok_ref, str(path))
