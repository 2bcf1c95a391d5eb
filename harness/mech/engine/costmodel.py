"""The step-cost model: how long one engine step takes, given what the step computes.

    step_ms = base_ms
            + prefill_ms_per_token   * P      (P: prompt tokens computed this step, all chunks)
            + prefill_ms_per_kilopair * A / 1000  (A: attention pairs of the chunks, sum chunk*(cached+chunk/2))
            + decode_ms_per_seq      * B      (B: sequences decoding one token)
            + decode_ms_per_kilotoken * C / 1000  (C: context tokens those sequences attend over)

It is linear in its features, so ``calibrate`` fits it by least squares, and a
run of K decode-only steps (B fixed, C growing by B per step) has the closed
form used by the simulator to jump over such stretches in O(1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.contract import atomic_write_json
from harness.contract.jsonio import read_json
from harness.contract.schemas import DocumentError
from harness.errors import InvalidInput

COST_MODEL_SCHEMA = "infkit/step-cost/v1"
FEATURES = ("base_ms", "prefill_ms_per_token", "prefill_ms_per_kilopair", "decode_ms_per_seq",
            "decode_ms_per_kilotoken")


@dataclass(frozen=True)
class StepCostModel:
    base_ms: float = 2.0
    prefill_ms_per_token: float = 0.05
    prefill_ms_per_kilopair: float = 0.0
    decode_ms_per_seq: float = 0.2
    decode_ms_per_kilotoken: float = 0.01

    def __post_init__(self) -> None:
        for name in FEATURES:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"step-cost coefficient {name} must be finite and >= 0, got {value}")
        if self.base_ms + self.prefill_ms_per_token + self.decode_ms_per_seq <= 0:
            raise InvalidInput("step-cost model predicts zero-time steps; at least one of base_ms, "
                               "prefill_ms_per_token, decode_ms_per_seq must be positive")

    def step_ms(self, prefill_tokens: int, attention_pairs: float, decode_seqs: int, decode_context: int) -> float:
        return (self.base_ms + self.prefill_ms_per_token * prefill_tokens
                + self.prefill_ms_per_kilopair * attention_pairs / 1000
                + self.decode_ms_per_seq * decode_seqs + self.decode_ms_per_kilotoken * decode_context / 1000)

    def decode_run_ms(self, steps: int, seqs: int, context: int) -> float:
        """Time of ``steps`` decode-only steps starting at total context ``context``, growing by ``seqs`` a step."""
        per_step = self.base_ms + self.decode_ms_per_seq * seqs + self.decode_ms_per_kilotoken * context / 1000
        growth = self.decode_ms_per_kilotoken * seqs / 1000
        return steps * per_step + growth * steps * (steps - 1) / 2

    def steps_to_reach(self, dt_ms: float, seqs: int, context: int) -> int:
        """Smallest K >= 1 with decode_run_ms(K) >= dt_ms."""
        if dt_ms <= 0:
            return 1
        a = self.decode_ms_per_kilotoken * seqs / 1000 / 2
        b = self.base_ms + self.decode_ms_per_seq * seqs + self.decode_ms_per_kilotoken * context / 1000 - a
        k = dt_ms / b if a == 0 else (-b + math.sqrt(b * b + 4 * a * dt_ms)) / (2 * a)
        k = max(1, math.ceil(k - 1e-9))
        while k > 1 and self.decode_run_ms(k - 1, seqs, context) >= dt_ms:
            k -= 1
        while self.decode_run_ms(k, seqs, context) < dt_ms:
            k += 1
        return k

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def save_cost_model(path: str | Path, model: StepCostModel, provenance: dict[str, Any]) -> Path:
    """Write the model as versioned JSON (``schema: infkit/step-cost/v1``)."""
    return atomic_write_json(path, {"schema": COST_MODEL_SCHEMA, "coefficients": model.to_dict(),
                                    "provenance": provenance})


def load_cost_model(path: str | Path) -> StepCostModel:
    try:
        doc = read_json(path)
    except DocumentError as exc:
        raise InvalidInput(f"cannot read step-cost model: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != COST_MODEL_SCHEMA:
        raise InvalidInput(f"{path} is not a step-cost model (expected schema {COST_MODEL_SCHEMA})")
    coeffs = doc.get("coefficients", {})
    unknown = set(coeffs) - set(FEATURES)
    if unknown:
        raise InvalidInput(f"{path}: unknown coefficients {sorted(unknown)}")
    return StepCostModel(**{k: float(v) for k, v in coeffs.items()})
