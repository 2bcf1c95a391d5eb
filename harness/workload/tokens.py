"""Prompts with an exact token count for a given tokenizer.

Text is built from sampled word-like token ids, decoded, re-encoded and adjusted
until the tokenizer counts exactly the requested number of tokens (special tokens
excluded). The tokenizer is identified by the sha256 of its ``tokenizer.json``.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InvalidInput
from harness.ids import sha256_file

MAX_ADJUST_ROUNDS = 64


@dataclass(frozen=True)
class TokenizerRef:
    name: str
    sha256: str
    path: Path


class ExactTokenizer:
    """A ``tokenizers.Tokenizer`` plus the word-like vocabulary prompts are drawn from."""

    def __init__(self, directory: str | os.PathLike):
        from tokenizers import Tokenizer

        d = Path(directory)
        file = d / "tokenizer.json" if d.is_dir() else d
        if not file.is_file():
            raise InvalidInput(
                f"{directory}: no tokenizer.json", hint="pass a directory holding a tokenizers/HF tokenizer.json"
            )
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the tokenizers library raises a bare Exception on bad files
            raise InvalidInput(f"{file}: cannot load tokenizer: {exc}") from None
        name = file.parent.name if file.name == "tokenizer.json" else file.stem
        self.ref = TokenizerRef(name=name or "tokenizer", sha256=sha256_file(file), path=file)
        self._words = self._word_texts()
        if len(self._words) < 16:
            raise InvalidInput(f"{file}: tokenizer has only {len(self._words)} word-like tokens; cannot build prompts")

    def _word_texts(self) -> list[str]:
        size = self._tok.get_vocab_size(with_added_tokens=False)
        special = set(self._tok.get_added_tokens_decoder())
        texts = self._tok.decode_batch([[i] for i in range(size)], skip_special_tokens=True)
        # Whole lowercase words only: they re-encode to themselves in BPE and WordLevel vocabularies.
        words = sorted({t.strip() for i, t in enumerate(texts) if i not in special and t.isascii()})
        words = [w for w in words if len(w) >= 2 and w.isalpha() and w.islower()]
        # Keep words that are exactly one token after a space: a text of n such " word"s is n tokens.
        spaced = self._tok.encode_batch([" " + w for w in words], add_special_tokens=False)
        return [w for w, enc in zip(words, spaced, strict=False) if len(enc.ids) == 1]

    @property
    def vocabulary(self) -> int:
        """How many words ``word`` numbers (each one token after a space)."""
        return len(self._words)

    def word(self, i: int) -> str:
        """Word ``i`` led by a space: exactly one token, and a run of them counts one token each."""
        return " " + self._words[i]

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def token_ends(self, text: str) -> list[int]:
        """The character offset in ``text`` where each of its tokens ends."""
        return [end for _, end in self._tok.encode(text, add_special_tokens=False).offsets]

    def ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def _words_text(self, rng: random.Random, n: int) -> str:
        return "".join(" " + rng.choice(self._words) for _ in range(n))

    def text(self, n_tokens: int, rng: random.Random, *, after: str = "") -> str:
        """Text that adds exactly ``n_tokens`` tokens when appended to ``after``.

        The text is a run of space-led words (so it starts with a space). With a
        prefix, the prefix's own tokens are checked to stay a prefix of the combined
        encoding, so a server's prefix cache sees the shared part unchanged.
        """
        if n_tokens < 0:
            raise InvalidInput(f"token count must be >= 0, got {n_tokens}")
        if n_tokens == 0:
            return ""
        base_ids = self.ids(after) if after else []
        base = len(base_ids)
        words = [" " + rng.choice(self._words) for _ in range(n_tokens)]
        for _ in range(MAX_ADJUST_ROUNDS):
            body = "".join(words)
            full_ids = self.ids(after + body)
            have = len(full_ids) - base
            if have == n_tokens and full_ids[:base] == base_ids:
                return body
            if have > n_tokens and len(words) > 1:
                del words[-max(1, (have - n_tokens) // 2) :]
            elif have > n_tokens:
                words = [" " + rng.choice(self._words)]
            else:
                words += [" " + rng.choice(self._words) for _ in range(max(1, (n_tokens - have) // 2))]
        raise InvalidInput(f"could not build a prompt of exactly {n_tokens} tokens with {self.ref.path}")
