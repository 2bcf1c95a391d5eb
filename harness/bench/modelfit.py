"""A bench's settings held to the served model's own config, before any setup or start.

The server's context is the smaller of ``--max-model-len`` and what the model's config allows
(``max_position_embeddings`` or its kin), and every request shape the bench's config checks is checked against
that: a prefix longer than the model's context is refused with the numbers. On the CPU backends the KV cache
(``--kv-cache-space-gib``) must hold one full-context sequence of this model, or the engine refuses to start.
A chat arm on a checkpoint the user brings needs that checkpoint's own chat template.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.errors import InvalidInput
from harness.models.identity import chat_template_file, model_config, model_context
from harness.models.resolve import LocalCheckpoint

GIB = 1 << 30
FP32 = ("float32", "fp32")


def kv_bytes_per_token(config: dict[str, Any], dtype: str | None) -> int | None:
    """2 (K and V) x layers x KV heads x head dim x element bytes, from config.json (None where it lacks a field)."""
    config = config.get("text_config") or config
    try:
        heads = config.get("num_key_value_heads") or config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        return 2 * int(config["num_hidden_layers"]) * int(heads) * int(head_dim) * (4 if dtype in FP32 else 2)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def fit_to_model(cfg: Any, model: Any) -> Any:
    """``cfg`` with its context no longer than the model's (its own checks run again on that), or a one-line error
    naming the model's numbers."""
    found = model_context(model.path)
    if found is not None and cfg.max_model_len > found[0]:
        context, field = found
        try:
            cfg = dataclasses.replace(cfg, max_model_len=context)
        except InvalidInput as exc:
            raise InvalidInput(f"{exc.message}: the model's context is {context} tokens ({field} in "
                               f"{model.path}/config.json)", hint=exc.hint or "shorten the bench's requests") from None
    per_token = kv_bytes_per_token(model_config(model.path), cfg.dtype)
    if getattr(cfg, "gpu", None) is None and per_token:
        tokens = cfg.kv_cache_space_gib * GIB // per_token
        if tokens < cfg.max_model_len:
            raise InvalidInput(f"--kv-cache-space-gib {cfg.kv_cache_space_gib} holds {tokens} tokens of "
                               f"{model.name} ({per_token} bytes each), fewer than its context of "
                               f"{cfg.max_model_len} tokens", hint="raise --kv-cache-space-gib or lower "
                               "--max-model-len")
    return cfg


def context_record(requested: dict[str, Any], cfg: Any, model: Any) -> dict[str, Any]:
    """run.json's effective context where the model's config shortened the requested one (else nothing)."""
    found = model_context(model.path)
    if found is None or cfg.max_model_len >= requested.get("max_model_len", cfg.max_model_len):
        return {}
    return {"max_model_len": cfg.max_model_len,
            "max_model_len_reason": f"the model's context ({found[1]} in config.json) is shorter than requested"}


def check_chat(arms: Any, model: Any) -> None:
    """A chat arm is served with the model's own chat template: a checkpoint the user brings must have one."""
    chat = [a.label for a in arms if a.client.get("api") == "chat"]
    if chat and isinstance(model, LocalCheckpoint) and chat_template_file(model.path) is None:
        raise InvalidInput(f"arm {chat[0]} sends chat requests, but {model.path} has no chat template (no "
                           "chat_template.jinja, nor chat_template in tokenizer_config.json)",
                           hint="save the model's chat template beside it, or run without the chat arms")
