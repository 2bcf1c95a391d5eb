"""Before a GPU engine serves a user's checkpoint, the engines' transformers 4.x must read it as its files declare:
a 5.x-style directory (RoPE base only under ``rope_parameters``, ``tokenizer_class: TokenizersBackend``) is refused
with each difference named, and its files are left as they are; without a 4.x python the record says the read did
not run."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from harness.errors import InvalidInput
from harness.models import engine_read
from harness.models.readers import PYTHON_ENV_VAR, TRANSFORMERS4
from harness.runtime.serving_env import find_serving_env

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": True}


def checkpoint(tokenizer_dir: Path, path: Path, *, five: bool, tokenizer_class: str) -> Path:
    """A checkpoint directory (config and tokenizer; no weights are read): 5.x's RoPE spelling or 4.x's."""
    path.mkdir()
    shutil.copyfile(tokenizer_dir / "tokenizer.json", path / "tokenizer.json")
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}} if five else
            {"rope_theta": 100000.0, "rope_scaling": None})
    (path / "config.json").write_text(json.dumps({**LLAMA, **rope}))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class}))
    return path


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_a_5x_checkpoint_is_refused_from_its_files_and_left_as_it_is(tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV_VAR, str(tmp_path / "no-such-python"))  # no 4.x python here
    five = checkpoint(tokenizer_dir, tmp_path / "five", five=True, tokenizer_class="TokenizersBackend")
    before = files(five)
    with pytest.raises(InvalidInput) as info:
        engine_read.check_user_checkpoint(five)
    message = str(info.value)
    assert "\n" not in message.split("hint")[0]
    assert "rope_theta 100000 only under rope_parameters" in message
    assert "tokenizer_class TokenizersBackend, a class transformers 4.x does not have" in message
    assert files(five) == before  # the user's files are never rewritten
    four = checkpoint(tokenizer_dir, tmp_path / "four", five=False, tokenizer_class="PreTrainedTokenizerFast")
    record = engine_read.check_user_checkpoint(four)
    assert record["engine_read"] == engine_read.NOT_RUN and record["from_files"] == []


@pytest.fixture
def engine_python(monkeypatch) -> Path:
    monkeypatch.delenv(PYTHON_ENV_VAR, raising=False)
    env = find_serving_env(TRANSFORMERS4)
    if env is None:
        pytest.skip("no cached transformers 4.57.1 venv (.ci/setup-transformers4.sh builds it)")
    return env.python


def test_the_engines_transformers_reads_another_rope_base_from_rope_parameters(tokenizer_dir, tmp_path,
                                                                               engine_python):
    five = checkpoint(tokenizer_dir, tmp_path / "five", five=True, tokenizer_class="PreTrainedTokenizerFast")
    assert engine_read.misread_by_engine(five, engine_python)[0] == [
        "transformers 4.57.1 reads rope_theta 10000.0 where the files declare 100000"]
    with pytest.raises(InvalidInput, match="only under rope_parameters.*reads rope_theta 10000.0"):
        engine_read.check_user_checkpoint(five)
    backend = checkpoint(tokenizer_dir, tmp_path / "backend", five=False, tokenizer_class="TokenizersBackend")
    (found,), _ = engine_read.misread_by_engine(backend, engine_python)
    assert found.startswith("transformers 4.x cannot read it: ValueError: Tokenizer class TokenizersBackend does not")
    four = checkpoint(tokenizer_dir, tmp_path / "four", five=False, tokenizer_class="PreTrainedTokenizerFast")
    record = engine_read.check_user_checkpoint(four)
    assert record["engine_read"]["rope_theta"] == 100000.0 and record["engine_read"]["differences"] == []
    assert record["engine_python"] == str(engine_python)


def test_a_bench_on_a_gpu_refuses_a_5x_user_checkpoint_before_any_setup(tokenizer_dir, tmp_path, monkeypatch):
    """The bench run is resolved before anything is built or started: a GPU run of a user's 5.x-style checkpoint
    stops there, naming what the engine would misread (planned as on a GPU box: this machine has none)."""
    from harness.backends import get_backend
    from harness.bench import get_bench
    from harness.bench.resolve import resolve
    from harness.models.resolve import LocalCheckpoint
    from harness.runtime import base as runtime_base

    monkeypatch.setenv(PYTHON_ENV_VAR, str(tmp_path / "no-such-python"))
    monkeypatch.setattr(runtime_base, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(runtime_base, "docker_engine_present", lambda: False)
    monkeypatch.setenv("INFKIT_LOCAL_BASE_IMAGE", "localhost/infkit/debian-bookworm-minbase:local")
    monkeypatch.chdir(tmp_path)
    five = checkpoint(tokenizer_dir, tmp_path / "five", five=True, tokenizer_class="TokenizersBackend")
    header = b'{"__metadata__":{"format":"pt"}}'
    (five / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)  # weights are never read here
    model = LocalCheckpoint(key="five", name="five", path=five, gguf_sha256="", checkpoint_sha256="sha256:1",
                            tokenizer_sha256="sha256:2", derived=None, origin={})
    spec = get_bench("69")
    from harness.bench.placement import planning

    with planning(), pytest.raises(InvalidInput, match="GPU engines' transformers 4.x would misread it: config.json"):
        resolve(spec, spec.config(gpu="0", model=str(five)), root=tmp_path, progress=print,
                model_of=lambda name, progress=None: model, backend_of=get_backend, dry=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["five"]  # nothing made beside it
