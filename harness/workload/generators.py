"""Workload generators, one per kind, registered by name.

Every random dimension has its own seed (``lengths``, ``content``, ``arrival``) and
every request's content comes from its own ``random.Random`` seeded with a string
naming the dimension and the request (string seeds are hashed with SHA-512 by
Python, stable across versions), so one request's text does not depend on the
others and the same parameters give the same file anywhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.jsonio import is_finite_number
from harness.errors import InvalidInput
from harness.ids import sha256_file
from harness.workload.arrival import Arrival, offsets
from harness.workload.model import Request, Workload, finish_workload
from harness.workload.tokens import ExactTokenizer

GENERATOR_VERSION = "1"


@dataclass(frozen=True)
class Option:
    """A kind-specific parameter; the CLI derives ``--name-with-dashes`` from it."""

    name: str
    type: type
    default: Any
    help: str
    minimum: int | None = None  # int options: the smallest value that makes sense
    omit_default: bool = False  # left out of the header's generator parameters at its default (ids stay as they were)


@dataclass(frozen=True)
class Common:
    """Parameters every kind takes."""

    arrival: Arrival
    seed: int = 0
    requests: int | None = None
    input_tokens: int = 256
    output_tokens: int = 64
    input_range: float = 0.0  # uniform in [N(1-r), N(1+r)], as vLLM's range ratio
    output_range: float = 0.0
    seeds: dict[str, int] = field(default_factory=dict)  # per-dimension overrides
    high_priority_fraction: float = 0.0  # > 0: a priority mix, this fraction tagged HIGH_PRIORITY, the rest NORMAL

    def seed_for(self, dimension: str) -> int:
        offset = {"lengths": 0, "content": 1, "arrival": 2, "priority": 3}[dimension]
        return self.seeds.get(dimension, self.seed + offset)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The random dimensions this workload has (priority only in a priority mix, so other ids stay as they were)."""
        return ("lengths", "content", "arrival", *(("priority",) if self.high_priority_fraction else ()))


HIGH_PRIORITY, NORMAL_PRIORITY = 0, 1  # vLLM's convention: the lower value is served first


def priorities(count: int, fraction: float, seed: int) -> list[int]:
    """Exactly round(fraction x count) requests tagged HIGH_PRIORITY, chosen by a seeded draw; the rest NORMAL."""
    high = set(random.Random(f"{seed}:priority").sample(range(count), round(fraction * count)))
    return [HIGH_PRIORITY if i in high else NORMAL_PRIORITY for i in range(count)]


Build = Callable[[Common, dict[str, Any], ExactTokenizer], tuple[list[Request], list[float] | None]]
Count = Callable[[Common, dict[str, Any]], int]  # how many requests the options imply (checks them on the way)
Describe = Callable[[Common, dict[str, Any], str], dict[str, Any]]  # extra header fields of a made workload


@dataclass(frozen=True)
class Generator:
    kind: str
    build: Build
    options: tuple[Option, ...] = ()
    paired_with: str | None = None
    help: str = ""
    count: Count | None = None  # None: --requests
    describe: Describe | None = None
    schedules: bool = False  # the generator gives every request's offset itself (sessions start by the arrival process)


GENERATORS: dict[str, Generator] = {}
INPUT_FILES = ("trace", "conversations")  # options that name a file the generator reads
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 10_000_000  # per request: beyond any served context length
MAX_SEED = 2**64


def register_generator(kind: str, *options: Option, paired_with: str | None = None, help: str = "",
                       count: Count | None = None, describe: Describe | None = None,
                       schedules: bool = False) -> Callable[[Build], Build]:
    def wrap(fn: Build) -> Build:
        GENERATORS[kind] = Generator(kind, fn, tuple(options), paired_with, help, count, describe, schedules)
        return fn
    return wrap


def _rng(seed: int, *what: object) -> random.Random:
    return random.Random(":".join(map(str, (seed, *what))))


def _length(rng: random.Random, mean: int, ratio: float) -> int:
    if ratio <= 0:
        return mean
    lo, hi = max(1, round(mean * (1 - ratio))), max(1, round(mean * (1 + ratio)))
    return rng.randint(lo, hi)


def _count(common: Common, opts: dict[str, Any] | None = None) -> int:
    if common.requests is None:
        raise InvalidInput("--requests must be >= 1")
    return common.requests


def _product(common: Common, a: int, b: int, what: str) -> int:
    n = a * b
    if n > MAX_REQUESTS:
        raise InvalidInput(f"{what} = {n} requests; at most {MAX_REQUESTS}")
    if common.requests is not None and common.requests != n:
        raise InvalidInput(f"--requests {common.requests} disagrees with {what} = {n}; omit --requests")
    return n


@register_generator("random", help="independent prompts; input/output lengths uniform around "
                                   "--input-tokens/--output-tokens")
def _random(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    n = _count(common)
    lengths_seed, content_seed = common.seed_for("lengths"), common.seed_for("content")
    out = []
    for i in range(n):
        lr = _rng(lengths_seed, "request", i)
        n_in, n_out = (_length(lr, common.input_tokens, common.input_range),
                       _length(lr, common.output_tokens, common.output_range))
        out.append(Request(index=i, input_tokens=n_in, output_tokens=n_out,
                           prompt=tok.text(n_in, _rng(content_seed, "prompt", i))))
    return out, None


COPY_INSTRUCTIONS = (
    "Repeat the following text exactly, word for word.",
    "Rewrite the following list of words without changing a single word.",
    "Copy the text below verbatim.",
)
COPY_ADJUST_ROUNDS = 8


def _copy_prompt(n_tokens: int, instruction: str, primer_words: int, content_seed: int, index: int,
                 tok: ExactTokenizer) -> str:
    """``instruction``, a passage, then the passage's first words restated: exactly ``n_tokens`` tokens.

    The passage length is the budget left after the instruction and the restatement; the
    overhead is re-measured and the passage rebuilt (same seed) until the count is exact.
    """
    head = f"{instruction}\n\nText:"
    overhead = tok.count(head) + primer_words + 8
    for _ in range(COPY_ADJUST_ROUNDS):
        passage_tokens = n_tokens - overhead
        if passage_tokens <= primer_words:
            raise InvalidInput(f"--input-tokens {n_tokens} is too short for a copy prompt: it needs more than "
                               f"{overhead + primer_words} tokens (instruction, passage, restated start)")
        passage = tok.text(passage_tokens, _rng(content_seed, "copy", index), after=head)
        primer = "".join(" " + w for w in passage.split(" ")[1:primer_words + 1])
        prompt = f"{head}{passage}\n\nRepeated text:{primer}"
        have = tok.count(prompt)
        if have == n_tokens:
            return prompt
        overhead += have - n_tokens
    raise InvalidInput(f"could not build a copy prompt of exactly {n_tokens} tokens with {tok.ref.path}")


@register_generator("copy", Option("primer_words", int, 4, "words of the passage restated after the instruction, "
                                                         "so the answer starts copying"),
                    paired_with="random",
                    help="repeat-the-text prompts: an instruction, a word passage, its first words restated; the "
                         "answer copies from the prompt (same lengths as random with the same seed)")
def _copy(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    n, primer = _count(common), opts["primer_words"]
    if primer < 1:
        raise InvalidInput("--primer-words must be >= 1")
    lengths_seed, content_seed = common.seed_for("lengths"), common.seed_for("content")
    out = []
    for i in range(n):
        lr = _rng(lengths_seed, "request", i)  # as in ``random``: the twin gets identical lengths
        n_in, n_out = (_length(lr, common.input_tokens, common.input_range),
                       _length(lr, common.output_tokens, common.output_range))
        prompt = _copy_prompt(n_in, COPY_INSTRUCTIONS[i % len(COPY_INSTRUCTIONS)], primer, content_seed, i, tok)
        out.append(Request(index=i, input_tokens=n_in, output_tokens=n_out, prompt=prompt))
    return out, None


_PREFIX_OPTIONS = (
    Option("groups", int, 4, "number of prefix groups G", minimum=1),
    Option("prompts_per_group", int, 8, "prompts per group P (requests = G x P)", minimum=1),
    Option("prefix_tokens", int, 512, "shared prefix length L in tokens", minimum=1),
    Option("suffix_tokens", int, 64, "per-request suffix length Q in tokens", minimum=1),
)


def _prefixed_count(common: Common, opts: dict[str, Any]) -> int:
    if opts["prefix_tokens"] + opts["suffix_tokens"] > MAX_TOKENS:
        raise InvalidInput(f"--prefix-tokens + --suffix-tokens: at most {MAX_TOKENS} tokens per request")
    return _product(common, opts["groups"], opts["prompts_per_group"], "--groups x --prompts-per-group")


def _prefixed(common: Common, opts: dict[str, Any], tok: ExactTokenizer, shared: bool) -> tuple[list[Request], None]:
    g_count, per_group = opts["groups"], opts["prompts_per_group"]
    prefix_len, suffix_len = opts["prefix_tokens"], opts["suffix_tokens"]
    n = g_count * per_group
    lengths_seed, content_seed = common.seed_for("lengths"), common.seed_for("content")
    group_prefix = [tok.text(prefix_len, _rng(content_seed, "prefix", g)) for g in range(g_count)]
    out = []
    for i in range(n):
        # Round-robin over groups: consecutive requests belong to different groups.
        g = i % g_count
        prefix = group_prefix[g] if shared else tok.text(prefix_len, _rng(content_seed, "unique-prefix", i))
        suffix = tok.text(suffix_len, _rng(content_seed, "suffix", i), after=prefix)
        n_out = _length(_rng(lengths_seed, "request", i), common.output_tokens, common.output_range)
        out.append(Request(index=i, input_tokens=prefix_len + suffix_len, output_tokens=n_out, prompt=prefix + suffix,
                           group=g, prefix_tokens=prefix_len if shared else 0))
    return out, None


@register_generator("shared-prefix", *_PREFIX_OPTIONS, paired_with="unique-prefix", count=_prefixed_count,
                    help="G groups x P prompts sharing an L-token prefix per group, Q-token unique suffix")
def _shared(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    return _prefixed(common, opts, tok, shared=True)


@register_generator("unique-prefix", *_PREFIX_OPTIONS, paired_with="shared-prefix", count=_prefixed_count,
                    help="paired twin of shared-prefix: identical token lengths, no shared prefix")
def _unique(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    return _prefixed(common, opts, tok, shared=False)


@register_generator("long-context", Option("context_tokens", int, 4096, "input length of every request", minimum=1),
                    help="long inputs of exactly --context-tokens tokens, short outputs")
def _long(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    n, n_in = _count(common), opts["context_tokens"]
    content_seed, lengths_seed = common.seed_for("content"), common.seed_for("lengths")
    return [Request(index=i, input_tokens=n_in, prompt=tok.text(n_in, _rng(content_seed, "prompt", i)),
                    output_tokens=_length(_rng(lengths_seed, "request", i), common.output_tokens, common.output_range))
            for i in range(n)], None


@register_generator("multi-turn", Option("conversations", int, 4, "number of conversations", minimum=1),
                    Option("turns", int, 3, "user turns per conversation", minimum=1),
                    help="chat conversations; turn t re-sends the full history (fixed synthetic assistant replies)",
                    count=lambda common, opts: _product(common, opts["conversations"], opts["turns"],
                                                        "--conversations x --turns"))
def _multi_turn(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    n_conv, n_turns = opts["conversations"], opts["turns"]
    content_seed, lengths_seed = common.seed_for("content"), common.seed_for("lengths")
    histories: list[list[dict[str, str]]] = [[] for _ in range(n_conv)]
    history_tokens = [0] * n_conv
    out = []
    for turn in range(n_turns):  # turn-major, so every re-sent history was sent before
        for c in range(n_conv):
            lr = _rng(lengths_seed, "turn", c, turn)
            n_user, n_out = (_length(lr, common.input_tokens, common.input_range),
                             _length(lr, common.output_tokens, common.output_range))
            user = {"role": "user", "content": tok.text(n_user, _rng(content_seed, "user", c, turn))}
            messages = (*histories[c], user)
            out.append(Request(index=len(out), input_tokens=history_tokens[c] + n_user, output_tokens=n_out,
                               messages=tuple(messages), conversation=c, turn=turn))
            reply = {"role": "assistant", "content": tok.text(n_out, _rng(content_seed, "assistant", c, turn))}
            histories[c] = [*messages, reply]
            history_tokens[c] += n_user + n_out
    return out, None


def check_options(kind: str, common: Common, options: dict[str, Any]) -> dict[str, Any]:
    """Every flag of a ``make`` checked before any work (tokenizer, model preparation) starts;
    returns the kind's options with defaults filled in."""
    if kind not in GENERATORS:
        raise InvalidInput(f"unknown workload kind {kind!r}", hint=f"choose one of: {', '.join(GENERATORS)}")
    gen = GENERATORS[kind]
    opts = {o.name: options.get(o.name, o.default) for o in gen.options}
    for name, value in (("--input-tokens", common.input_tokens), ("--output-tokens", common.output_tokens)):
        if not 1 <= value <= MAX_TOKENS:
            raise InvalidInput(f"{name} {value}: must be in [1, {MAX_TOKENS}]")
    for name, value in (("--input-range", common.input_range), ("--output-range", common.output_range)):
        if not (is_finite_number(value) and 0 <= value < 1):
            raise InvalidInput(f"{name} {value}: must be in [0, 1)")
    if not (is_finite_number(common.high_priority_fraction) and 0 <= common.high_priority_fraction <= 1):
        raise InvalidInput(f"--high-priority-fraction {common.high_priority_fraction}: must be in [0, 1]")
    for dim in common.dimensions:
        if abs(common.seed_for(dim)) >= MAX_SEED:
            raise InvalidInput(f"the {dim} seed {common.seed_for(dim)} (--seed or --{dim}-seed): must be within "
                               "+-2**64")
    if common.requests is not None and not 1 <= common.requests <= MAX_REQUESTS:
        raise InvalidInput(f"--requests {common.requests}: must be in [1, {MAX_REQUESTS}]")
    for o in gen.options:
        if o.minimum is not None and opts[o.name] is not None and not o.minimum <= opts[o.name] <= MAX_TOKENS:
            raise InvalidInput(f"--{o.name.replace('_', '-')} {opts[o.name]}: must be in [{o.minimum}, {MAX_TOKENS}]")
    (gen.count or _count)(common, opts)
    return opts


def arrival_draws(kind: str, common: Common, options: dict[str, Any]) -> int | None:
    """How many arrival times a workload of ``kind`` draws (one per request), or None where it schedules its own
    (session starts) or counts the rows of an input file."""
    gen = GENERATORS[kind]
    if gen.schedules or any(options.get(name) for name in INPUT_FILES):
        return None
    return (gen.count or _count)(common, {o.name: options.get(o.name, o.default) for o in gen.options})


def make_workload(kind: str, common: Common, options: dict[str, Any], tokenizer_dir: str | Path) -> Workload:
    """Build a workload of ``kind``; ``options`` holds the kind's own parameters (defaults filled in)."""
    opts = check_options(kind, common, options)
    gen = GENERATORS[kind]
    tok = ExactTokenizer(tokenizer_dir)
    requests, trace_s = gen.build(common, opts, tok)
    sched = trace_s if gen.schedules else offsets(common.arrival, len(requests), common.seed_for("arrival"), trace_s)
    requests = [Request(**{**r.__dict__, "offset_s": off}) for r, off in zip(requests, sched, strict=False)]
    if common.high_priority_fraction:
        tags = priorities(len(requests), common.high_priority_fraction, common.seed_for("priority"))
        requests = [Request(**{**r.__dict__, "priority": p}) for r, p in zip(requests, tags, strict=True)]
    params = {"version": GENERATOR_VERSION, "seed": common.seed, "input_tokens": common.input_tokens,
              "output_tokens": common.output_tokens,
              "input_range": common.input_range, "output_range": common.output_range, "requests": common.requests,
              **{o.name: (Path(opts[o.name]).name if o.name in INPUT_FILES and isinstance(opts[o.name], (str, Path))
                          else opts[o.name])
                 for o in gen.options if not (o.omit_default and opts[o.name] == o.default)}}
    for name in INPUT_FILES:  # an input file is named by its content, not its path
        if isinstance(opts.get(name), (str, Path)):
            params[f"{name}_sha256"] = sha256_file(opts[name])
    if common.high_priority_fraction:
        params["high_priority_fraction"] = common.high_priority_fraction
    header: dict[str, Any] = {
        "workload_id": "",
        "kind": kind,
        "generator": params,
        "arrival": common.arrival.to_header(),
        "seeds": {d: common.seed_for(d) for d in common.dimensions},
        "tokenizer": {"name": tok.ref.name, "sha256": tok.ref.sha256},
        "paired_with": gen.paired_with,
        **(gen.describe(common, opts, kind) if gen.describe else {}),
    }
    return finish_workload(header, requests)
