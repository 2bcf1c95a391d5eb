"""A lean Server-Sent Events reader for OpenAI-style streams.

Only ``data:`` lines matter for ``/v1/completions`` and ``/v1/chat/completions``; the
parser splits raw network reads into lines, keeps a partial last line for the next
read, and hands back the payloads. ``[DONE]`` ends the stream.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from harness.contract.jsonio import json_type, raw_decode_capped

DONE = object()


_DECODER = json.JSONDecoder()


class MalformedStream(ValueError):
    """A ``data:`` payload that is not a JSON object of the expected shape."""


def _loads(payload: bytes) -> Any:
    """``json.loads`` for one stripped payload, without its encoding sniffing and whitespace regexes
    (about half the cost per streamed token)."""
    try:
        text = payload.decode("utf-8")
        try:
            obj, end = _DECODER.raw_decode(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            # An integer beyond Python's digit limit: parse again with it as a marker, so a usage
            # count records as absent with its reason instead of failing the whole request.
            obj, end = raw_decode_capped(text)
    except UnicodeDecodeError as exc:
        raise MalformedStream(f"data: payload is not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        raise MalformedStream(f"data: payload is not JSON: {str(exc)[:120]}") from None
    except RecursionError:
        raise MalformedStream("data: payload is nested too deeply") from None
    if end != len(text):
        raise MalformedStream(f"data: payload has extra data after the JSON value at char {end}")
    return obj


def load_payload(payload: bytes) -> Any:
    """One JSON payload (a streamed ``data:`` line or a whole non-streamed answer); ``MalformedStream`` if not JSON."""
    return _loads(payload)


class SSEParser:
    """Feed raw bytes, get back decoded JSON payloads (or ``DONE``).

    A malformed payload ends the parse: ``feed`` returns the payloads before it and keeps the
    ``MalformedStream`` in ``failure`` (what arrived first is timed and kept; the rest is not read).
    """

    __slots__ = ("_partial", "failure")

    def __init__(self) -> None:
        self._partial = b""
        self.failure: MalformedStream | None = None

    def feed(self, data: bytes) -> list[Any]:
        if self.failure is not None:
            return []
        if self._partial:
            data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (":"), event:/id:/retry: fields
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out.append(DONE)
            elif payload:
                try:
                    out.append(_loads(payload))
                except MalformedStream as exc:
                    self.failure = exc
                    break
        return out


class ChunkInfo(NamedTuple):
    """What one streamed payload carries."""

    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None
    error: str | None


def _wrong(what: str, value: Any, wanted: str) -> MalformedStream:
    return MalformedStream(f"{what} is {json_type(value)}, not {wanted}")


def interpret(payload: Any) -> ChunkInfo:
    """Text, finish reason, usage or in-stream error of one completions/chat payload.

    A payload of another shape (not an object, ``choices`` not a list of objects, text or
    finish reason not strings) raises ``MalformedStream``; ``usage`` is passed on as sent and
    checked where the record is built. The checks are inline ``type`` tests: this runs per token.
    """
    if type(payload) is not dict:
        raise _wrong("data: payload", payload, "an object")
    usage = payload.get("usage")
    choices = payload.get("choices")
    if not choices:
        # {"error": {...}} (OpenAI, newer vLLM) or a bare {"object": "error", "message": ...} (older vLLM)
        err = payload.get("error") if "error" in payload else (payload if payload.get("object") == "error" else None)
        if err is not None:
            message = err.get("message", err) if isinstance(err, dict) else err
            return ChunkInfo("", None, usage, (message if isinstance(message, str) else json.dumps(message))[:500])
        if choices is not None and type(choices) is not list:
            raise _wrong("choices", choices, "a list")
        return ChunkInfo("", None, usage, None)
    if type(choices) is not list:
        raise _wrong("choices", choices, "a list")
    choice = choices[0]
    if type(choice) is not dict:
        raise _wrong("choices[0]", choice, "an object")
    delta = choice.get("delta")
    if delta is not None:  # chat: content, or reasoning text from reasoning models
        if type(delta) is not dict:
            raise _wrong("choices[0].delta", delta, "an object")
        text = delta.get("content") or delta.get("reasoning_content") or ""
    else:
        text = choice.get("text") or ""
    if type(text) is not str:
        raise _wrong("the choice's text", text, "a string")
    finish = choice.get("finish_reason")
    if finish is not None and type(finish) is not str:
        raise _wrong("finish_reason", finish, "a string")
    return ChunkInfo(text, finish, usage, None)
