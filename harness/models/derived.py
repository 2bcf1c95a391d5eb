"""Models derived from a prepared one: its config with some fields changed, random weights from a fixed seed.

Tensor parallel 2 needs attention and KV head counts that divide by 2; SmolLM2-135M has 9 and 3.
``smollm2-135m-even-heads`` keeps SmolLM2's architecture, sizes and tokenizer and changes only
the head counts, with weights initialised by transformers from ``seed`` in the model converter venv
(``random_init.py``; ``harness.models.prepare.CONVERTER_ENV``). Same base, overrides, seed and torch
give the same checkpoint bytes; its sha256 is the model version, and every result that serves it says
the weights are random.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.paths import cache_root
from harness.errors import CapabilityMissing
from harness.ids import sha256_bytes, sha256_file
from harness.models.stamp import PreparedModel, from_stamp, ready, write_stamp
from harness.runtime.serving_env import Progress, ServingEnv, file_lock

RANDOM_INIT = Path(__file__).with_name("random_init.py")
COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


@dataclass(frozen=True)
class DerivedSource:
    """A base model's config with ``overrides``, and random weights from ``seed``."""

    key: str
    name: str
    base: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    weights: str = "random"

    def record(self) -> dict[str, Any]:
        return {"base": self.base, "config_overrides": dict(self.overrides), "seed": self.seed,
                "weights": self.weights, "init": "transformers from_config under torch.manual_seed(seed), bfloat16"}


DERIVED: dict[str, DerivedSource] = {
    "smollm2-135m-even-heads": DerivedSource(
        key="smollm2-135m-even-heads", name="SmolLM2-135M-even-heads (random weights)", base="smollm2-135m",
        overrides={"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}, seed=0),
}


def recipe_digest(source: DerivedSource, base_checkpoint_sha256: str) -> str:
    body = json.dumps({**source.record(), "base_checkpoint": base_checkpoint_sha256,
                       "random_init_sha256": sha256_file(RANDOM_INIT)}, sort_keys=True)
    return sha256_bytes(body.encode()).removeprefix("sha256:")[:12]


def derive(env: ServingEnv, source: DerivedSource, base_dir: Path, target: Path, progress: Progress) -> dict[str, Any]:
    """Write the derived checkpoint into a scratch folder renamed into ``target`` when complete; its stamp."""

    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    config = json.loads((base_dir / "config.json").read_text())
    config.update(source.overrides)
    (scratch / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in COPIED:
        if (base_dir / name).is_file():
            shutil.copy2(base_dir / name, scratch / name)
    started = time.monotonic()
    progress(f"model: {source.key}: {source.base}'s config with {dict(source.overrides)}, random weights "
             f"(seed {source.seed})")
    proc = subprocess.run([str(env.python), str(RANDOM_INIT), "--dir", str(scratch), "--seed", str(source.seed)],
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if proc.returncode != 0 or not any(scratch.glob("*.safetensors")):
        shutil.rmtree(scratch, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise CapabilityMissing(f"random weights for {source.key} failed (exit {proc.returncode}):\n{tail}")
    stamp = write_stamp(scratch, {"key": source.key, "name": source.name, "gguf_sha256": "",
                                  "derived": source.record(), "random_init_sha256": sha256_file(RANDOM_INIT),
                                  "prepare_s": round(time.monotonic() - started, 1)})
    if target.exists():
        shutil.rmtree(target)
    scratch.rename(target)
    progress(f"model: {source.key} ready in {time.monotonic() - started:.0f} s ({stamp['checkpoint_sha256']})")
    return stamp


def derived_dir(source: DerivedSource, base: PreparedModel, root: Path | None = None) -> Path:
    """Where the derived checkpoint lives: named by its recipe over the base's version, so found from stamps alone."""
    return (root or cache_root()) / "models" / f"{source.key}-{recipe_digest(source, base.checkpoint_sha256)}"


def ensure_derived(source: DerivedSource, *, base: PreparedModel, make_env: Callable[[], ServingEnv],
                   root: Path | None, progress: Progress, verify: bool) -> PreparedModel:
    """The derived checkpoint, prepared from its (already prepared) base on first use (lock-protected, verified like
    any model); ``make_env`` (a venv with torch and transformers) is called only when it must be made."""
    target = derived_dir(source, base, root)
    with file_lock(target.parent / f".{target.name}.lock"):
        prepared = ready(target, verify)
        if prepared is None:
            derive(make_env(), source, base.path, target, progress)
            prepared = from_stamp(target, verify=True)
            if prepared is None:
                raise CapabilityMissing(f"derived model at {target} does not match its own stamp")
    return prepared
