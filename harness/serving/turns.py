"""Session results by turn index and per session: what each turn's prompt held as sent, and how fast it was served.

Per turn index over the records of that turn: requests, completed, TTFT and TPOT distributions, the prompt
tokens the server counted (``usage.prompt_tokens``: the whole conversation as sent, chat template included),
and the prefix-cache hit rate ``cached_tokens / prompt_tokens`` where the server reports cached tokens
(vLLM with ``--enable-prompt-tokens-details``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.client.records import RequestRecord
from harness.contract.distribution import token_summary
from harness.serving.metrics import distribution, per_request


def _turn_row(turn: int, recs: list[RequestRecord]) -> dict[str, Any]:
    done = [r for r in recs if r.completed and r.sent_s is not None and r.end_s is not None]
    per = [per_request(r) for r in done]
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    cached = [(r.cached_tokens, r.prompt_tokens) for r in done if r.cached_tokens is not None and r.prompt_tokens]
    return {
        "turn": turn, "requests": len(recs), "completed": len(done),
        "ttft_ms": distribution([p["ttft_ms"] for p in per if p["ttft_ms"] is not None]),
        "tpot_ms": distribution([p["tpot_ms"] for p in per if p["tpot_ms"] is not None]),
        "prompt_tokens_sent": token_summary(prompts) if prompts else None,
        "prefix_hit_rate": round(sum(c for c, _ in cached) / sum(p for _, p in cached), 6) if cached else None,
    }


def session_details(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """``by_turn`` and ``per_session`` of a session run (None when the records carry no turns)."""
    turned = [r for r in records if "turn" in r.extra and "session" in r.extra]
    if not turned:
        return None
    by_turn: dict[int, list[RequestRecord]] = {}
    by_session: dict[int, list[RequestRecord]] = {}
    for r in turned:
        by_turn.setdefault(r.extra["turn"], []).append(r)
        by_session.setdefault(r.extra["session"], []).append(r)
    sessions = []
    for sid in sorted(by_session):
        recs = sorted(by_session[sid], key=lambda r: r.extra["turn"])
        failed = next((r for r in recs if not r.completed), None)
        sessions.append({"session": sid, "turns": len(recs), "completed": sum(r.completed for r in recs),
                         "stopped_at_turn": failed.extra["turn"] if failed else None,
                         "prompt_tokens_sent": [r.prompt_tokens for r in recs]})
    return {"by_turn": [_turn_row(t, by_turn[t]) for t in sorted(by_turn)], "per_session": sessions,
            "sessions_stopped": sum(s["stopped_at_turn"] is not None for s in sessions),
            "note": "prompt_tokens_sent: the server's usage.prompt_tokens of each turn as sent (history with the "
                    "server's replies, chat template included)"}
