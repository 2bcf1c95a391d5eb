"""Trace workloads: a trace's arrivals and lengths, and for Mooncake traces its prefix structure, as content.

Each hash id of a Mooncake row is one block of ``block`` tokens. Block text is a run of space-led words, each
exactly one token (``ExactTokenizer.word``), so texts concatenate without changing counts: equal ids give
byte-identical blocks, and every distinct block opens with a tag of words numbering it in base V (the
vocabulary of such words, least significant first), so two different blocks differ in their first token
whenever the workload has at most V distinct blocks, and within the first ``len(tag)`` tokens otherwise.
Tokens after the last block (a hash list shorter than the row's length) are unique to the request.

``trace-unique`` is the twin: the same rows, lengths and arrivals, every block its own.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import InvalidInput
from harness.workload.generators import Common, Option, register_generator
from harness.workload.model import Request
from harness.workload.tokens import ExactTokenizer
from harness.workload.traceio import (
    FORMATS,
    TraceRow,
    TraceSlice,
    check_slice,
    scaled_rows,
    sharing,
)

TRACE_OPTIONS = (
    Option("trace", str, None, "trace file (see --trace-format)"),
    Option("trace_format", str, "infkit", f"one of {', '.join(FORMATS)}", omit_default=True),
    Option("trace_block_tokens", int, 512, "mooncake: tokens per hash-id block in the trace", minimum=1,
           omit_default=True),
    Option("block_tokens", int, None, "rescale every hash-id block to this many tokens", minimum=1, omit_default=True),
    Option("length_scale", float, None, "scale other lengths by this (default: block-tokens / trace-block-tokens)",
           omit_default=True),
    Option("time_scale", float, 1.0, "multiply arrival offsets (0.5: twice as fast)", omit_default=True),
    Option("max_requests", int, None, "keep the first N requests of the slice", minimum=1, omit_default=True),
    Option("window", str, None, "START:END seconds after the first request (trace time) to keep", omit_default=True),
    Option("trace_filter", str, None, "burstgpt: COLUMN=VALUE[,COLUMN=VALUE] rows to keep", omit_default=True),
)


def trace_slice(opts: dict[str, Any]) -> TraceSlice:
    return TraceSlice(**{k: opts[k] for k in TraceSlice.__dataclass_fields__ if k in opts})


def _rows(common: Common, opts: dict[str, Any]) -> tuple[list[TraceRow], int]:
    if not opts.get("trace"):
        raise InvalidInput("kind 'trace' needs --trace FILE")
    return scaled_rows(Path(opts["trace"]), trace_slice(opts), common.requests)


def _trace_count(common: Common, opts: dict[str, Any]) -> int:
    if not opts.get("trace"):
        raise InvalidInput("kind 'trace' needs --trace FILE")
    check_slice(trace_slice(opts))
    return len(_rows(common, opts)[0])


class BlockText:
    """Word lists of blocks by key: a numbering tag, then words drawn from the key's own generator."""

    def __init__(self, tok: ExactTokenizer, seed: int, block: int, distinct: int) -> None:
        self.tok, self.seed, self.block = tok, seed, block
        self.digits = 1
        while tok.vocabulary ** self.digits < distinct:
            self.digits += 1
        if self.digits > block:
            raise InvalidInput(f"--block-tokens {block}: too short to keep {distinct} blocks apart; use at least "
                               f"{self.digits}")
        self.numbers: dict[Any, int] = {}
        self.cache: dict[Any, list[str]] = {}

    def words(self, key: Any) -> list[str]:
        if key not in self.cache:
            n = self.numbers.setdefault(key, len(self.numbers))
            tag = [self.tok.word((n // self.tok.vocabulary ** d) % self.tok.vocabulary) for d in range(self.digits)]
            rng = random.Random(f"{self.seed}:block:{key!r}")
            self.cache[key] = tag + [self.tok.word(rng.randrange(self.tok.vocabulary))
                                     for _ in range(self.block - self.digits)]
        return self.cache[key]


def _block_prompt(texts: BlockText, keys: list[Any], tail_key: Any, n_tokens: int) -> str:
    words: list[str] = []
    for key in keys:
        words += texts.words(key)
    words = words[:n_tokens]
    while len(words) < n_tokens:
        words += texts.words((tail_key, len(words)))
    return "".join(words[:n_tokens])


def _build(common: Common, opts: dict[str, Any], tok: ExactTokenizer,
           shared: bool) -> tuple[list[Request], list[float]]:
    rows, _ = _rows(common, opts)
    spec = trace_slice(opts)
    content_seed = common.seed_for("content")
    keyed = [[h if shared else ("u", i, j) for j, h in enumerate(r.hash_ids or ())] for i, r in enumerate(rows)]
    if not any(keyed):  # no prefix structure: independent prompts, as this kind always made them
        reqs = [Request(index=i, input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                        prompt=tok.text(r.input_tokens, random.Random(f"{content_seed}:prompt:{i}")))
                for i, r in enumerate(rows)]
        return reqs, [r.t_s for r in rows]
    distinct = len({k for keys in keyed for k in keys}) + sum(r.input_tokens // spec.block + 1 for r in rows)
    texts = BlockText(tok, content_seed, spec.block, distinct)
    reqs = []
    for i, (r, keys) in enumerate(zip(rows, keyed, strict=True)):
        prompt = _block_prompt(texts, keys, ("tail", i), r.input_tokens)
        if tok.count(prompt) != r.input_tokens:
            raise InvalidInput(f"could not build a prompt of exactly {r.input_tokens} tokens from blocks with "
                               f"{tok.ref.path}")
        reqs.append(Request(index=i, input_tokens=r.input_tokens, output_tokens=r.output_tokens, prompt=prompt,
                            hash_ids=tuple(r.hash_ids) if shared and r.hash_ids else None))
    return reqs, [r.t_s for r in rows]


def describe(common: Common, opts: dict[str, Any], kind: str) -> dict[str, Any]:
    """The header's ``sharing`` (what a perfect prefix cache could reuse) and the rows a format rule skipped."""
    rows, skipped = _rows(common, opts)
    out: dict[str, Any] = {"trace_rows_skipped": skipped} if skipped else {}
    if any(r.hash_ids for r in rows):
        if kind == "trace-unique":  # every block its own: ids no other request has
            first = [sum(len(x.hash_ids or ()) for x in rows[:i]) for i in range(len(rows))]
            rows = [replace(r, hash_ids=tuple(range(f, f + len(r.hash_ids or ()))))
                    for f, r in zip(first, rows, strict=True)]
        out["sharing"] = sharing(rows, trace_slice(opts).block)
    return out


@register_generator("trace", *TRACE_OPTIONS, paired_with=None, count=_trace_count, describe=describe,
                    help="replay a trace's timestamps and token lengths; mooncake hash ids become shared blocks")
def _trace(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], list[float]]:
    return _build(common, opts, tok, shared=True)


@register_generator("trace-unique", *TRACE_OPTIONS, paired_with="trace", count=_trace_count, describe=describe,
                    help="twin of trace: the same lengths and arrivals, every block its own (nothing shared)")
def _trace_unique(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], list[float]]:
    return _build(common, opts, tok, shared=False)
