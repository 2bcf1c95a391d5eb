"""Speculative decoding as served: acceptance from the engine's counters, greedy identity, and the prediction.

Pure functions of arm runs (their ``details.server_metrics.spec_decode`` counter deltas and
per-request records) and of the simulator's formulas (``harness.mech.specdec``).

Acceptance, pooled over an arm's completed repeats:
  acceptance rate          = Σ accepted / Σ drafted tokens
  mean acceptance length L = 1 + Σ accepted / Σ drafts   (tokens per verification pass that had a draft)
  per position k           = Σ accepted at k / Σ drafts  (P[the first k+1 drafts all accepted]),
  whose ratios are the conditional acceptances α_k the simulator's positional formula and
  Monte-Carlo take.

Prediction (Leviathan et al.): a pass with γ̄ drafted tokens costs γ̄·c + 1 target passes and
yields L tokens, S = E / (γ·c + 1) — where verifying γ̄ + 1 tokens costs what one decode step
does. On a CPU that holds only while the pass is memory-bound; the verification pass then
costs 1 + β·γ̄ decode steps, and β is a property of the host, fitted here from the self-draft arm
(c = 1, acceptance near 1: ``fit_verify_cost``), with an interval from the ends of that arm's served
interval (``fit_verify_cost_interval``) over which each prediction is also made. A step without a draft
(n-gram lookup found no match) costs one pass for one token. Over a run's decode tokens T (generated minus one per
request, which comes with the prefill), with D passes that had a draft:
  S_pred = T / (D·(γ̄·c + 1 + β·γ̄) + (T − D·L))
which is E / (γ·c + 1 + β·γ) when every pass drafts. The served speedup is the inverse of the
paired ratio of mean TPOT (a mean, as the prediction is); the error is predicted / served − 1
(``harness.bench.lib.prediction``: > 0 over-predicts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.bench.lib import greedy
from harness.bench.records import ArmRun, completed_runs
from harness.client.records import RequestRecord
from harness.mech.specdec.formulas import (
    expected_tokens,
    expected_tokens_positional,
    simulate_acceptance,
)


@dataclass(frozen=True)
class Acceptance:
    """Spec-decode counter deltas pooled over an arm's repeats, and the generated tokens they cover."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...]
    generated_tokens: float
    requests: int

    @property
    def rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_length(self) -> float | None:
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts else None

    @property
    def position_rates(self) -> list[float]:
        """P[positions 0..k all accepted] per position k."""
        return [a / self.drafts for a in self.accepted_per_position] if self.drafts else []

    @property
    def conditional_alphas(self) -> list[float]:
        """α_k = P[k accepted | 0..k-1 accepted]; positions never reached end the list."""
        out, prev = [], 1.0
        for p in self.position_rates:
            if prev <= 0:
                break
            out.append(min(1.0, p / prev))
            prev = p
        return out

    @property
    def decode_tokens(self) -> float:
        return max(0.0, self.generated_tokens - self.requests)

    @property
    def undrafted_passes(self) -> float:
        """Decode tokens no draft covered: each cost one plain decode step."""
        return max(0.0, self.decode_tokens - self.drafts * (self.mean_length or 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
                "accepted_per_position": list(self.accepted_per_position), "generated_tokens": self.generated_tokens,
                "requests": self.requests, "acceptance_rate": _round(self.rate), "mean_acceptance_length":
                _round(self.mean_length), "mean_draft_length": _round(self.mean_draft_length),
                "position_acceptance": [round(p, 6) for p in self.position_rates],
                "conditional_acceptance": [round(a, 6) for a in self.conditional_alphas]}


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _pair(values: tuple[float, float] | None) -> list[float] | None:
    return None if values is None else [round(v, 6) for v in values]


def pooled_acceptance(runs: Sequence[ArmRun], label: str) -> Acceptance | None:
    """Counter deltas of ``label``'s completed repeats summed; None when the engine exported none."""
    sums = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "generated": 0.0}
    positions: list[float] = []
    requests, seen = 0, False
    for run in completed_runs(runs, label):
        metrics = run.result.detail("server_metrics") or {}
        spec = metrics.get("spec_decode")
        if not spec or any(spec.get(k) is None for k in ("drafts", "draft_tokens", "accepted_tokens")):
            continue
        seen = True
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            sums[key] += spec[key]
        per_pos = spec.get("accepted_tokens_per_position") or []
        positions += [0.0] * (len(per_pos) - len(positions))
        for k, v in enumerate(per_pos):
            positions[k] += v
        generated = (metrics.get("tokens") or {}).get("generation_tokens")
        sums["generated"] += generated if generated is not None else sum(r.completion_tokens or 0 for r in run.records)
        requests += run.completed
    if not seen:
        return None
    return Acceptance(drafts=sums["drafts"], draft_tokens=sums["draft_tokens"], accepted_tokens=sums["accepted_tokens"],
                      accepted_per_position=tuple(positions), generated_tokens=sums["generated"], requests=requests)


@dataclass(frozen=True)
class Prediction:
    """Predicted speedup from measured acceptance and the simulator's formula, and its inputs."""

    gamma: int  # configured draft length
    cost_ratio: float  # c: one draft token's cost in target passes
    cost_source: str
    expected_iid: float  # (1 - α^(γ+1)) / (1 - α) at the measured acceptance rate
    expected_positional: float | None  # 1 + Σ Π α_i with the measured conditional acceptances (= L)
    monte_carlo: tuple[float, float] | None  # (mean, stderr) tokens per pass drawn with those α
    formula_speedup: float  # E_iid / (γ·c + 1): every pass drafts γ tokens
    speedup: float  # S_pred over the run's decode tokens, undrafted passes included
    drafted_fraction: float  # share of decode passes that had a draft
    verify_cost: float = 0.0  # β: extra decode steps per drafted token a verification pass costs on this host
    verify_cost_interval: tuple[float, float] | None = None  # β at the ends of the self-draft arm's served interval
    speedup_interval: tuple[float, float] | None = None  # S_pred with β anywhere in that interval (low, high)

    def to_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "cost_ratio": round(self.cost_ratio, 6), "cost_source": self.cost_source,
                "expected_tokens_iid": round(self.expected_iid, 6),
                "expected_tokens_positional": _round(self.expected_positional),
                "monte_carlo": None if self.monte_carlo is None else
                {"mean_tokens": round(self.monte_carlo[0], 6), "stderr": round(self.monte_carlo[1], 6)},
                "formula_speedup": round(self.formula_speedup, 6), "predicted_speedup": round(self.speedup, 6),
                "drafted_fraction": round(self.drafted_fraction, 6), "verify_cost": round(self.verify_cost, 6),
                "verify_cost_interval": _pair(self.verify_cost_interval),
                "predicted_speedup_over_verify_cost_interval": _pair(self.speedup_interval)}

    def miss_reason(self, served_low: float, served_high: float) -> str:
        """Why a prediction outside the served interval may miss: β's own uncertainty where the predictions over
        its interval reach the served one, else c (stated, not measured)."""
        cost = f"c {self.cost_source}"
        if self.speedup_interval is None or self.verify_cost_interval is None:
            return cost
        (low, high), (b_low, b_high) = self.speedup_interval, self.verify_cost_interval
        span = (f"b {self.verify_cost:.2f} [{b_low:.2f}, {b_high:.2f}] over the self-draft arm's served interval "
                f"predicts {low:.2f}x to {high:.2f}x")
        if low <= served_high and high >= served_low:
            return f"{span}, which reaches the served interval: within the fit's uncertainty ({cost})"
        return f"{span}, none of it inside the served interval: not the fit's uncertainty; {cost}"


def fit_verify_cost(acc: Acceptance, served_speedup: float) -> float | None:
    """β from the self-draft arm (c = 1): the extra decode steps a verification pass costs per drafted token,
    solved from S_served = T / (D·(γ̄ + 1 + β·γ̄) + undrafted); None without drafts; >= 0."""
    if not acc.drafts or not acc.mean_draft_length or acc.mean_length is None or served_speedup <= 0:
        return None
    per_pass = (acc.decode_tokens / served_speedup - acc.undrafted_passes) / acc.drafts  # γ̄ + 1 + β·γ̄
    return max(0.0, (per_pass - acc.mean_draft_length - 1) / acc.mean_draft_length)


def fit_verify_cost_interval(acc: Acceptance, served_low: float, served_high: float) -> tuple[float, float] | None:
    """β at the ends of the self-draft arm's served-speedup interval: (at its high end, at its low end), since a
    slower served self-draft means a dearer verification pass."""
    low, high = fit_verify_cost(acc, served_high), fit_verify_cost(acc, served_low)
    return None if low is None or high is None else (low, high)


def drafted_speedup(acc: Acceptance, cost_ratio: float, verify_cost: float) -> float:
    """S_pred = T / (D·(γ̄·(c + β) + 1) + undrafted passes) over the run's decode tokens T."""
    drafted_cost = acc.drafts * ((acc.mean_draft_length or 0.0) * (cost_ratio + verify_cost) + 1)
    return acc.decode_tokens / (drafted_cost + acc.undrafted_passes)


def predict(acc: Acceptance, gamma: int, cost_ratio: float, cost_source: str, *, passes: int = 20_000,
            seed: int = 0, verify_cost: float = 0.0,
            verify_cost_interval: tuple[float, float] | None = None) -> Prediction | None:
    """The prediction for a run with acceptance ``acc``; None without drafts or decode tokens."""
    if not acc.drafts or acc.rate is None or acc.mean_length is None or not acc.decode_tokens:
        return None
    iid = expected_tokens(min(1.0, acc.rate), gamma)
    alphas = acc.conditional_alphas
    positional = expected_tokens_positional(alphas) if alphas else None
    mc = simulate_acceptance(alphas, passes, seed) if alphas else None
    over = None if verify_cost_interval is None else (drafted_speedup(acc, cost_ratio, verify_cost_interval[1]),
                                                     drafted_speedup(acc, cost_ratio, verify_cost_interval[0]))
    return Prediction(gamma=gamma, cost_ratio=cost_ratio, cost_source=cost_source, expected_iid=iid,
                      expected_positional=positional, monte_carlo=(mc.mean_tokens, mc.stderr) if mc else None,
                      formula_speedup=iid / (gamma * (cost_ratio + verify_cost) + 1), verify_cost=verify_cost,
                      speedup=drafted_speedup(acc, cost_ratio, verify_cost),
                      drafted_fraction=acc.drafts / (acc.drafts + acc.undrafted_passes),
                      verify_cost_interval=verify_cost_interval, speedup_interval=over)


def draft_cost_ratio(config: Mapping[str, Any], draft_layers: int) -> float:
    """c for a draft made of the target's first ``draft_layers`` layers, stated from weights per token.

    A decode token multiplies every decoder layer's weights and the LM head once, so the cost
    ratio is (draft layers × layer weights + head) / (target layers × layer weights + head);
    attention over the context and the embedding lookup are left out (small at these lengths).
    """
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * inter
    lm_head = hidden * config["vocab_size"]
    return (draft_layers * layer + lm_head) / (config["num_hidden_layers"] * layer + lm_head)


@dataclass(frozen=True)
class Agreement:
    """Greedy identity of an arm against a fixed reference's outputs, request by request, judged on the exact-match
    share (``harness.bench.lib.greedy``) with its stated tolerance; ``basis`` says which outputs were compared."""

    compared: int
    identical: int
    first_mismatch: dict[str, Any] | None
    min_exact_share: float = 1.0
    basis: str = ""
    mean_prefix_share: float | None = None

    @property
    def rate(self) -> float | None:
        return self.identical / self.compared if self.compared else None

    @property
    def passed(self) -> bool:
        return self.compared > 0 and self.identical >= self.min_exact_share * self.compared - 1e-9

    def to_dict(self) -> dict[str, Any]:
        return {"compared": self.compared, "identical": self.identical, "rate": _round(self.rate),
                "passed": self.passed, "first_mismatch": self.first_mismatch,
                "min_exact_share": self.min_exact_share, "tolerance": round(1 - self.min_exact_share, 6),
                "mean_prefix_share": self.mean_prefix_share, "basis": self.basis}


def reference_outputs(runs: Sequence[ArmRun], labels: Sequence[str]) -> list[RequestRecord]:
    """The reference's record per request index: the first completed one with text in run order."""
    ref: dict[int, RequestRecord] = {}
    for run in runs:
        if run.label in labels and not run.failure:
            for rec in run.records:
                if rec.completed and rec.output_text is not None:
                    ref.setdefault(rec.index, rec)
    return list(ref.values())


def agreement(runs: Sequence[ArmRun], label: str, reference: Sequence[RequestRecord], min_exact_share: float = 1.0,
              basis: str = "") -> Agreement:
    """Every completed request of ``label`` (all repeats, valid or not: a late client does not change the text)
    against ``reference`` (``greedy.agreement``), with the first mismatch shown."""
    done = completed_runs(runs, label)
    figures = greedy.agreement(reference, [rec for run in done for rec in run.records], min_exact_share)
    compared = figures["requests"]
    identical = round((figures["exact_share"] or 0.0) * compared)
    return Agreement(compared, identical, first_mismatch(done, reference), min_exact_share, basis,
                     figures["mean_prefix_share"])


def first_mismatch(runs: Sequence[ArmRun], reference: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Where the first output in run order that differs from the reference's does, with the text around it."""
    want = {r.index: r.output_text or "" for r in reference}
    for run in runs:
        for rec in run.records:
            text, ref = rec.output_text, want.get(rec.index)
            if not rec.completed or text is None or ref is None or text == ref:
                continue
            at = greedy.first_difference(ref, text)
            return {"repeat": run.repeat, "index": rec.index, "char": at, "got": text[max(0, at - 20):at + 40],
                    "want": ref[max(0, at - 20):at + 40]}
    return None
