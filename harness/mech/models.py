"""Published model configurations the mechanisms use, by name (values from each model's config.json).

KV-cache layout per attention kind:
  MHA/GQA/MQA: 2 (K and V) x layers x kv_heads x head_dim elements per token
  MLA:         layers x (kv_lora_rank + qk_rope_head_dim) elements per token (one latent, shared by K and V)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from harness.errors import InvalidInput

Attention = Literal["mha", "gqa", "mqa", "mla"]
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelConfig:
    name: str
    attention: Attention
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    params: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "params"):
            if getattr(self, name) <= 0:
                raise InvalidInput(f"model {self.name}: {name} must be positive, got {getattr(self, name)}")
        if self.attention == "mla" and (self.kv_lora_rank <= 0 or self.qk_rope_head_dim < 0):
            raise InvalidInput(f"model {self.name}: MLA needs kv_lora_rank > 0 and qk_rope_head_dim >= 0")
        if self.attention == "mqa" and self.num_kv_heads != 1:
            raise InvalidInput(f"model {self.name}: MQA has exactly one KV head, got {self.num_kv_heads}")
        if self.num_heads % self.num_kv_heads:
            raise InvalidInput(f"model {self.name}: num_heads {self.num_heads} is not a multiple of "
                               f"num_kv_heads {self.num_kv_heads}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        ModelConfig("Llama-3-8B", "gqa", 32, 32, 8, 128, 4096, 14336, 128256, 8_030_261_248),
        ModelConfig("Llama-2-7B", "mha", 32, 32, 32, 128, 4096, 11008, 32000, 6_738_415_616),
        ModelConfig("Falcon-7B", "mqa", 32, 71, 1, 64, 4544, 18176, 65024, 7_217_189_760),
        ModelConfig("Qwen3-30B-A3B", "gqa", 48, 32, 4, 128, 2048, 6144, 151936, 30_532_122_624),
        ModelConfig("DeepSeek-V3", "mla", 61, 128, 128, 192, 7168, 18432, 129280, 671_026_419_200,
                    kv_lora_rank=512, qk_rope_head_dim=64),
        ModelConfig("SmolLM2-135M", "gqa", 30, 9, 3, 64, 576, 1536, 49152, 134_515_008),
    )
}


def get_model(name: str) -> ModelConfig:
    for key, model in MODELS.items():
        if key.lower() == name.lower():
            return model
    raise InvalidInput(f"unknown model {name!r}", hint="known: " + ", ".join(MODELS))


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InvalidInput(f"unknown dtype {dtype!r}", hint="one of " + ", ".join(DTYPE_BYTES)) from None


def kv_bytes_per_token(model: ModelConfig, kv_dtype: str = "bf16") -> int:
    """KV-cache bytes one token occupies across all layers."""
    size = dtype_bytes(kv_dtype)
    if model.attention == "mla":
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * size
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * size
