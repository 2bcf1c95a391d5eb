"""A small real byte-level BPE tokenizer trained on generated text, for tests that need exact token counts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

SYLLABLES = ("ka", "lo", "mi", "nu", "re", "sa", "to", "vi", "ba", "de", "fo", "gu", "pe", "ri", "zu", "ch", "th", "an")


def train_tokenizer(directory: Path, vocab_size: int = 1000, seed: int = 7) -> Path:
    """Train a ByteLevel BPE tokenizer and save ``directory/tokenizer.json``; returns the directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    lines = [" ".join(rng.choice(words) for _ in range(30)) + "." for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory



def session_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Train once per session into a temporary folder (call from a session-scoped fixture)."""
    return (
        train_tokenizer(tmp_path_factory.getbasetemp() / "tiny-bpe")
        if not (tmp_path_factory.getbasetemp() / "tiny-bpe" / "tokenizer.json").exists()
        else tmp_path_factory.getbasetemp() / "tiny-bpe"
    )
