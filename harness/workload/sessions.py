"""Session workloads: multi-turn conversations whose later turns resend the server's own replies.

The file holds what does not depend on the server: per session its user turns (from a ShareGPT file or
generated), each turn's output limit, the think time before each turn after the first, and the session's
start offset (the arrival process runs over sessions). At run time (``harness.client.sessions``) turn t+1
is sent only after turn t ended, after its think time, with the conversation so far: the user turns and
the replies the server actually gave. ``input_tokens`` of a session turn is the tokens that turn's user
message adds; the result records what each prompt held as sent.

``sessions-fresh`` is the twin: the same turns, lengths, think times and starts, but each turn's history is
resent with its words shuffled (nearly the same length, no prefix in common with what was sent before), so a
gain of ``sessions`` over it is attributed to reuse of the real history.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from harness.errors import InvalidInput
from harness.workload.arrival import offsets
from harness.workload.generators import MAX_REQUESTS, Common, Option, register_generator
from harness.workload.model import OFFSET_DECIMALS, Request
from harness.workload.tokens import ExactTokenizer

FORMATS = ("sharegpt",)
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "assistant": "assistant",
         "bing": "assistant", "bard": "assistant", "system": "system"}
THINK = ("const", "exp", "uniform")

SESSION_OPTIONS = (
    Option("conversations", str, None, "ShareGPT JSON file of conversations (default: synthetic turns)"),
    Option("format", str, "sharegpt", f"conversation file format: {', '.join(FORMATS)}"),
    Option("sessions", int, 4, "sessions (synthetic), or at most this many from the file", minimum=1),
    Option("turns", int, 3, "user turns per session (synthetic), or at most this many from the file", minimum=1),
    Option("think_time", str, "const:0", "seconds between a turn's end and the next: const:S, exp:MEAN or "
                                         "uniform:LO:HI"),
)


def parse_think(spec: str) -> tuple[str, tuple[float, ...]]:
    name, _, rest = spec.partition(":")
    try:
        params = tuple(float(x) for x in rest.split(":")) if rest else ()
    except ValueError:
        params = ()
    arity = {"const": 1, "exp": 1, "uniform": 2}.get(name)
    if arity is None or len(params) != arity or any(not 0 <= p < 1e6 for p in params) or (
            name == "uniform" and params[0] > params[1]):
        raise InvalidInput(f"--think-time {spec!r}: use const:S, exp:MEAN or uniform:LO:HI (seconds >= 0)")
    return name, params


def _think(spec: str, rng: random.Random) -> float:
    name, p = parse_think(spec)
    if name == "const":
        value = p[0]
    elif name == "exp":
        value = rng.expovariate(1.0 / p[0]) if p[0] > 0 else 0.0
    else:
        value = rng.uniform(p[0], p[1])
    return round(value, OFFSET_DECIMALS)


def read_sharegpt(path: str | Path, max_sessions: int, max_turns: int) -> list[list[tuple[str, str | None]]]:
    """Per conversation, its (user text, the file's reply or None) turns; a malformed entry names its place."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"--conversations {p}: not a readable JSON file: {str(exc)[:120]}") from None
    if type(data) is not list:
        raise InvalidInput(f"{p}: a ShareGPT file is a JSON list of {{\"conversations\": [...]}} objects")
    out = []
    for i, conv in enumerate(data):
        where = f"{p}: conversation {i}"
        msgs = conv.get("conversations") if type(conv) is dict else None
        if type(msgs) is not list:
            raise InvalidInput(f"{where}: no \"conversations\" list")
        turns: list[tuple[str, str | None]] = []
        for j, m in enumerate(msgs):
            if type(m) is not dict or type(m.get("value")) is not str or m.get("from") not in ROLES:
                raise InvalidInput(f"{where}, message {j}: needs \"from\" (one of {', '.join(ROLES)}) and a string "
                                   "\"value\"")
            role = ROLES[m["from"]]
            if role == "user" and m["value"].strip():
                turns.append((m["value"], None))
            elif role == "assistant" and turns and turns[-1][1] is None:
                turns[-1] = (turns[-1][0], m["value"])
        if turns:
            out.append(turns[:max_turns])
        if len(out) == max_sessions:
            break
    if not out:
        raise InvalidInput(f"{p}: no conversation with a user turn")
    return out


def _turns(common: Common, opts: dict[str, Any], tok: ExactTokenizer | None) -> list[list[tuple[str | int, int]]]:
    """Per session, per turn: (user text, or its token count when no tokenizer is given; output limit)."""
    lengths = random.Random(f"{common.seed_for('lengths')}:sessions")
    if opts["conversations"]:
        convs = read_sharegpt(opts["conversations"], opts["sessions"], opts["turns"])
        return [[(text, min(common.output_tokens, max(1, tok.count(reply))) if tok and reply else common.output_tokens)
                 for text, reply in conv] for conv in convs]
    content = common.seed_for("content")
    out = []
    for c in range(opts["sessions"]):
        session = []
        for t in range(opts["turns"]):
            n_user = max(1, round(common.input_tokens * (1 + lengths.uniform(-common.input_range, common.input_range))))
            text = tok.text(n_user, random.Random(f"{content}:session:{c}:{t}")) if tok else n_user
            session.append((text, common.output_tokens))
        out.append(session)
    return out


def _count(common: Common, opts: dict[str, Any]) -> int:
    if opts["format"] not in FORMATS:
        raise InvalidInput(f"--format {opts['format']!r}", hint=f"choose one of: {', '.join(FORMATS)}")
    parse_think(opts["think_time"])
    if common.requests is not None:
        raise InvalidInput("sessions take --sessions and --turns, not --requests")
    n = sum(len(s) for s in _turns(common, opts, None))
    if n > MAX_REQUESTS:
        raise InvalidInput(f"{n} turns; at most {MAX_REQUESTS}")
    return n


def _build(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], list[float | None]]:
    sessions = _turns(common, opts, tok)
    starts = offsets(common.arrival, len(sessions), common.seed_for("arrival"))
    think_rng = random.Random(f"{common.seed_for('arrival')}:think")
    order = sorted(range(len(sessions)), key=lambda c: (starts[c] or 0.0, c))
    reqs: list[Request] = []
    for c in order:
        for t, (text, n_out) in enumerate(sessions[c]):
            reqs.append(Request(index=len(reqs), input_tokens=tok.count(str(text)) or 1, output_tokens=n_out,
                                messages=({"role": "user", "content": str(text)},), conversation=c, turn=t,
                                think_s=_think(opts["think_time"], think_rng) if t else None))
    return reqs, [starts[r.conversation] for r in reqs]  # type: ignore[index]


def describe(common: Common, opts: dict[str, Any], kind: str) -> dict[str, Any]:
    sessions = _turns(common, opts, None)
    return {"sessions": {"sessions": len(sessions), "turns": sum(len(s) for s in sessions),
                         "max_turns": max(len(s) for s in sessions),
                         "history": "fresh" if kind == "sessions-fresh" else "real",
                         "source": opts["format"] if opts["conversations"] else "synthetic",
                         "think_time": opts["think_time"]}}


HELP = ("multi-turn sessions: turn t+1 is sent after turn t ends and a think time, with the server's own "
        "replies in its history")


@register_generator("sessions", *SESSION_OPTIONS, paired_with="sessions-fresh", count=_count, describe=describe,
                    schedules=True, help=HELP)
def _sessions(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], list[float | None]]:
    return _build(common, opts, tok)


@register_generator("sessions-fresh", *SESSION_OPTIONS, paired_with="sessions", count=_count, describe=describe,
                    schedules=True, help="twin of sessions: the same turns and timing, each history resent with "
                                         "its words shuffled (no prefix reuse)")
def _sessions_fresh(common: Common, opts: dict[str, Any],
                    tok: ExactTokenizer) -> tuple[list[Request], list[float | None]]:
    return _build(common, opts, tok)
