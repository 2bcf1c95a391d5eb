"""The one model table builds the published architectures: parameter counts match config.json's models."""

from __future__ import annotations

import pytest

from harness.cuda.models import TINY, llama_config, model_shape
from harness.errors import InvalidInput
from harness.models.shapes import get_model, llama_models


@pytest.mark.parametrize("name", ["tiny", *llama_models()])
def test_llama_shapes_build_models_with_the_tables_parameter_count(torch, name):
    from transformers import LlamaForCausalLM

    with torch.device("meta"):  # shapes only: no memory for the 8B models' weights
        model = LlamaForCausalLM(llama_config(name))
    assert sum(p.numel() for p in model.parameters()) == model_shape(name).params


def test_lookup_is_case_insensitive_and_refuses_other_architectures():
    assert model_shape("smollm2-135m") is get_model("SmolLM2-135M")
    assert model_shape("tiny") is TINY
    with pytest.raises(InvalidInput, match="not a Llama-architecture model"):
        model_shape("Falcon-7B")
    with pytest.raises(InvalidInput, match="unknown model"):
        model_shape("gpt-5")
