"""Published model shapes, by name: the one table mechanisms and CUDA experiments read.

Values are each model's ``config.json``. The CPU mechanisms take KV-cache and
weight budgets from a shape; the CUDA experiments build a Llama config from one
to run the real architecture with random weights (``harness.cuda.models``).

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
LLAMA = "LlamaForCausalLM"


@dataclass(frozen=True)
class ModelShape:
    """A model's architecture as its config.json states it (Llama-only fields are None for other families)."""

    name: str
    architecture: str  # config.json "architectures"[0]
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
    rope_theta: float | None = None
    rms_norm_eps: float | None = None
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool | None = None

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

    def llama_fields(self) -> dict[str, Any]:
        """``transformers.LlamaConfig`` keyword arguments for this shape (Llama-architecture models only)."""
        if self.architecture != LLAMA:
            raise InvalidInput(f"model {self.name} is a {self.architecture}, not a Llama-architecture model",
                               hint="random-weight models are built for: " + ", ".join(llama_models()))
        return dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                    intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
                    num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
                    head_dim=self.head_dim, rope_theta=self.rope_theta, rms_norm_eps=self.rms_norm_eps,
                    max_position_embeddings=self.max_position_embeddings,
                    tie_word_embeddings=self.tie_word_embeddings)


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("Llama-3-8B", LLAMA, "gqa", 32, 32, 8, 128, 4096, 14336, 128256, 8_030_261_248,
                   rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=False),
        ModelShape("Llama-2-7B", LLAMA, "mha", 32, 32, 32, 128, 4096, 11008, 32000, 6_738_415_616,
                   rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=4096, tie_word_embeddings=False),
        ModelShape("Falcon-7B", "FalconForCausalLM", "mqa", 32, 71, 1, 64, 4544, 18176, 65024, 7_217_189_760),
        ModelShape("Qwen3-30B-A3B", "Qwen3MoeForCausalLM", "gqa", 48, 32, 4, 128, 2048, 6144, 151936,
                   30_532_122_624),
        ModelShape("DeepSeek-V3", "DeepseekV3ForCausalLM", "mla", 61, 128, 128, 192, 7168, 18432, 129280,
                   671_026_419_200, kv_lora_rank=512, qk_rope_head_dim=64),
        # HuggingFaceTB/SmolLM2-135M(-Instruct): the model the CPU serving default runs.
        ModelShape("SmolLM2-135M", LLAMA, "gqa", 30, 9, 3, 64, 576, 1536, 49152, 134_515_008,
                   rope_theta=100000.0, rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True),
    )
}


def get_model(name: str) -> ModelShape:
    """A published shape by name, case-insensitively (``smollm2-135m`` is ``SmolLM2-135M``)."""
    for key, model in MODELS.items():
        if key.lower() == name.lower():
            return model
    raise InvalidInput(f"unknown model {name!r}", hint="known: " + ", ".join(MODELS))


def llama_models() -> list[str]:
    return [m.name for m in MODELS.values() if m.architecture == LLAMA]


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InvalidInput(f"unknown dtype {dtype!r}", hint="one of " + ", ".join(DTYPE_BYTES)) from None


def kv_bytes_per_token_heads(num_layers: int, num_kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """KV bytes per token of an MHA/GQA/MQA cache: 2 (K and V) x layers x kv_heads x head_dim x element bytes."""
    return 2 * num_layers * num_kv_heads * head_dim * element_bytes


def kv_bytes_per_token(model: ModelShape, kv_dtype: str = "bf16") -> int:
    """KV-cache bytes one token occupies across all layers."""
    size = dtype_bytes(kv_dtype)
    if model.attention == "mla":
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * size
    return kv_bytes_per_token_heads(model.num_layers, model.num_kv_heads, model.head_dim, size)
