"""bench-68's analysis against hand-computed values: pooled acceptance, the prediction, greedy identity, the
decision."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from harness.bench.analysis import ClaimResult
from harness.bench.benches.bench68.acceptance import (
    Agreement,
    agreement,
    draft_cost_ratio,
    pooled_acceptance,
    predict,
    reference_outputs,
)
from harness.bench.benches.bench68.arms import paired_steps
from harness.bench.benches.bench68.table import Row, decide_top, row_lines
from harness.bench.metrics import ACCEPTANCE_RATE, E2E_P50, MEAN_ACCEPTANCE_LENGTH
from harness.bench.records import ArmRun
from harness.bench.spec import Arm, Claim, History
from harness.bench.stats import PairedEffect, repeat_ratio_effect
from harness.client.records import RequestRecord
from harness.contract import Effect
from harness.mech.specdec.formulas import expected_tokens
from tests.typed_results import arm_result

SMOLLM2 = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "num_hidden_layers": 30,
    "vocab_size": 49152,
}


def record(index: int, text: str, tokens: int = 20) -> RequestRecord:
    return RequestRecord(
        index=index,
        status="length",
        sent_s=0.0,
        first_token_s=0.1,
        end_s=1.0,
        completion_tokens=tokens,
        output_text=text,
    )


def run(label: str, repeat: int, texts=("a", "b"), spec=None, generated=None, failure=None) -> ArmRun:
    metrics = {"spec_decode": spec, "tokens": {"generation_tokens": generated}}
    result = {
        "conclusion": {"failure": failure, "valid": True, "invalid_reasons": []},
        "details": {"server_metrics": metrics},
    }
    return ArmRun(
        label=label,
        repeat=repeat,
        result_path=Path("r.json"),
        result=arm_result(result),
        records=tuple(record(i, t) for i, t in enumerate(texts)),
    )


SPEC_R1 = {
    "drafts": 6,
    "draft_tokens": 18,
    "accepted_tokens": 10,
    "accepted_tokens_per_position": [5, 3, 2],
    "acceptance_rate": 10 / 18,
    "mean_acceptance_length": 1 + 10 / 6,
}
SPEC_R2 = {
    "drafts": 4,
    "draft_tokens": 12,
    "accepted_tokens": 7,
    "accepted_tokens_per_position": [3, 3, 1],
    "acceptance_rate": 7 / 12,
    "mean_acceptance_length": 1 + 7 / 4,
}


def test_acceptance_pools_counter_deltas_over_repeats():
    runs = [
        run("copy/ngram", 1, spec=SPEC_R1, generated=20),
        run("copy/ngram", 2, spec=SPEC_R2, generated=20),
        run("copy/ngram", 3, spec=SPEC_R1, generated=20, failure={"kind": "server_crash"}),
    ]
    acc = pooled_acceptance(runs, "copy/ngram")
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (10, 30, 17)  # the failed repeat is left out
    assert acc.accepted_per_position == (8, 6, 3) and acc.generated_tokens == 40 and acc.requests == 4
    assert acc.rate == pytest.approx(17 / 30) and acc.mean_length == pytest.approx(2.7)
    assert acc.position_rates == pytest.approx([0.8, 0.6, 0.3])
    assert acc.conditional_alphas == pytest.approx([0.8, 0.75, 0.5])
    assert acc.decode_tokens == 36  # one token per request comes with the prefill
    assert pooled_acceptance([run("off", 1)], "off") is None  # no counters: speculation was off


def test_prediction_by_hand():
    runs = [run("x", 1, spec=SPEC_R1, generated=20), run("x", 2, spec=SPEC_R2, generated=20)]
    acc = pooled_acceptance(runs, "x")
    # 10 drafted passes make 27 tokens; the other 36 - 27 = 9 decode tokens took one pass each.
    free = predict(acc, 3, 0.0, "stated", passes=4000, seed=1)
    assert free.speedup == pytest.approx(36 / (10 + 9))
    assert free.drafted_fraction == pytest.approx(10 / 19)
    assert free.expected_positional == pytest.approx(2.7)  # 1 + 0.8 + 0.6 + 0.3: the measured mean length
    assert free.expected_iid == pytest.approx(expected_tokens(17 / 30, 3))
    assert free.formula_speedup == pytest.approx(expected_tokens(17 / 30, 3))
    mean, stderr = free.monte_carlo
    assert abs(mean - 2.7) < 4 * stderr + 1e-9
    costly = predict(acc, 3, 0.5, "stated", passes=200)
    assert costly.speedup == pytest.approx(36 / (10 * (3 * 0.5 + 1) + 9))  # 3 draft tokens per pass at c = 0.5
    assert costly.formula_speedup == pytest.approx(expected_tokens(17 / 30, 3) / 2.5)
    no_drafts = pooled_acceptance(
        [
            run(
                "y",
                1,
                spec={
                    **SPEC_R1,
                    "drafts": 0,
                    "draft_tokens": 0,
                    "accepted_tokens": 0,
                    "accepted_tokens_per_position": [],
                },
                generated=20,
            )
        ],
        "y",
    )
    assert predict(no_drafts, 3, 0.0, "stated") is None


def test_draft_cost_ratio_of_smollm2_by_weights_per_token():
    layer = 576 * 64 * (2 * 9 + 2 * 3) + 3 * 576 * 1536  # q, k, v, o projections + gate, up, down
    head = 576 * 49152
    assert draft_cost_ratio(SMOLLM2, 10) == pytest.approx((10 * layer + head) / (30 * layer + head))
    assert draft_cost_ratio(SMOLLM2, 10) == pytest.approx(0.4737, abs=1e-4)
    assert draft_cost_ratio(SMOLLM2, 30) == 1.0


def test_greedy_agreement_per_request_and_the_first_mismatch():
    runs = [
        run("copy/off@a", 1, texts=("hello world", "x")),
        run("copy/off@b", 1, texts=("hello world", "y")),
        run("copy/a", 1, texts=("hello world", "x")),
        run("copy/a", 2, texts=("hello there", "x")),
    ]
    ref = reference_outputs(runs, ["copy/off@a", "copy/off@b"])
    assert {r.index: r.output_text for r in ref} == {0: "hello world", 1: "x"}  # the first run that completed each
    got = agreement(runs, "copy/a", ref)
    assert (got.compared, got.identical, got.passed) == (4, 3, False) and got.rate == 0.75
    assert got.first_mismatch["repeat"] == 2 and got.first_mismatch["index"] == 0 and got.first_mismatch["char"] == 6
    assert got.mean_prefix_share == round((1 + 1 + 6 / 11 + 1) / 4, 4)  # described beside the verdict, not judged
    assert agreement(runs, "copy/off@b", ref).identical == 1  # the baseline itself differed on index 1
    assert agreement(runs, "missing", ref).compared == 0 and not agreement(runs, "missing", ref).passed
    # the stated tolerance: one of four may differ at a share of 0.75, not at 0.8
    assert agreement(runs, "copy/a", ref, 0.75).passed and not agreement(runs, "copy/a", ref, 0.8).passed
    assert agreement(runs, "copy/a", ref, 0.75).to_dict()["tolerance"] == 0.25


def test_acceptance_metrics_read_the_run_counters():
    runs = [run("x", 1, spec=SPEC_R1), run("x", 2, spec=SPEC_R2)]
    assert ACCEPTANCE_RATE.value(runs) == pytest.approx((10 / 18 + 7 / 12) / 2)
    assert MEAN_ACCEPTANCE_LENGTH.value(runs) == pytest.approx((1 + 10 / 6 + 1 + 7 / 4) / 2)


def test_paired_steps_alternate_and_stop_once_the_variant_is_refused():
    pairs = [
        (Arm("copy/off@v", "copy", "off"), Arm("copy/v", "copy", "v")),
        (Arm("random/off@v", "random", "off"), Arm("random/v", "random", "v")),
    ]
    history = History(cfg=None, model=None)
    steps = [(r, a.label) for r, a in paired_steps(pairs, 2, "v")(history)]
    assert steps == [
        (1, "copy/v"),
        (1, "copy/off@v"),
        (1, "random/v"),
        (1, "random/off@v"),
        (2, "copy/off@v"),
        (2, "copy/v"),
        (2, "random/off@v"),
        (2, "random/v"),
    ]
    gen = paired_steps(pairs, 2, "v")(history)
    assert next(gen)[1].label == "copy/v"
    history.refused["v"] = "engine refused"
    assert list(gen) == []  # no baseline arm is spent on a variant that never started


def claim(
    value: float, lo: float, hi: float, decision: str, b: str = "copy/v", stats: PairedEffect | None = None
) -> ClaimResult:
    effect = Effect(
        metric="e2e_ms.p50",
        estimator="ratio",
        value=value,
        ci_low=lo,
        ci_high=hi,
        confidence=0.95,
        no_effect=1.0,
        better="lower",
        method="t",
        n_pairs=5,
        arm_a="copy/off@v",
        arm_b=b,
    )
    return ClaimResult(
        Claim(E2E_P50, "copy/off@v", b), effect, decision, "paired", "reason", (value,) * 5, margin=0.05, stats=stats
    )


def row(
    workload: str,
    arm: str,
    e2e: ClaimResult | None,
    texts_ok: bool = True,
    refused: str | None = None,
    counted: bool = True,
) -> Row:
    ok = Agreement(4, 4 if texts_ok else 3, None if texts_ok else {"index": 1})
    acc = pooled_acceptance([run(arm, 1, spec=SPEC_R1, generated=20)], arm) if counted else None
    return Row(
        workload=workload,
        arm=arm,
        refused=refused,
        e2e=e2e,
        tpot=e2e,
        tpot_ms=(10.0, 8.0),
        e2e_ms=(100.0, 80.0),
        acceptance=acc,
        prediction=None,
        agreement=ok,
        baseline_agreement=Agreement(4, 4, None),
        requested_tokens=3,
    )


def test_the_primary_row_decides_and_is_the_headline_and_secondaries_are_holm_corrected():
    strong = repeat_ratio_effect([(100.0, 60.0 + r) for r in range(5)])  # p far below 0.025 / 3
    # p 0.017: adopt alone, not after Holm
    weak = repeat_ratio_effect([(100.0, v) for v in (80.0, 93.0, 86.0, 91.0, 89.0)])
    rows = [
        row("copy", "ngram-k2", claim(0.8, 0.7, 0.9, "adopt")),
        row("copy", "ngram-k4", claim(0.6, 0.5, 0.7, "adopt", stats=strong)),
        row("random", "ngram-k2", claim(0.87, 0.8, 0.94, "adopt", stats=weak)),
        row("random", "ngram-k4", claim(1.3, 1.2, 1.4, "reject")),
        row("copy", "eagle", None, refused="method eagle needs CUDA"),
    ]
    top = decide_top(rows)
    # the headline is the primary row (first on copy), not the best one
    assert top.decision == "adopt" and top.effect.value == 0.8 and top.evidence_level == "paired"
    assert top.headline[0]["role"] == "primary" and top.headline[0]["name"] == "copy/ngram-k2"
    roles = {r.label: (r.role, r.decision) for r in top.rows}
    assert roles["copy/ngram-k4"] == ("secondary", "adopt")
    assert roles["random/ngram-k2"] == ("secondary", "inconclusive (Holm)")
    assert roles["random/ngram-k4"] == ("secondary", "inconclusive (Holm)")  # no spread to test: p = 1
    assert any("also help after Holm" in line and "copy/ngram-k4" in line for line in top.lines)
    assert (
        "helps (E2E p50 interval below 1): copy/ngram-k2 (x0.80), copy/ngram-k4 (x0.60), random/ngram-k2 (x0.87)"
        in top.lines
    )
    assert "hurts (E2E p50 interval above 1): random/ngram-k4 (x1.30)" in top.lines
    assert "not run here (capability_missing): eagle" in top.lines
    assert top.quality["passed"] and top.quality["value"] == 1.0 and not top.mismatched
    assert rows[1].served_speedup == pytest.approx((1 / 0.6, 1 / 0.7, 1 / 0.5))
    assert any("capability_missing: method eagle needs CUDA" in line for line in row_lines(rows))


def test_all_rejected_is_reject_and_mixed_is_inconclusive_headlined_on_copy():
    assert (
        decide_top(
            [row("copy", "a", claim(1.2, 1.1, 1.3, "reject")), row("random", "a", claim(1.5, 1.4, 1.6, "reject"))]
        ).decision
        == "reject"
    )
    top = decide_top(
        [
            row("copy", "a", claim(0.95, 0.8, 1.1, "inconclusive")),
            row("random", "a", claim(0.5, 0.3, 1.2, "inconclusive")),
            row("random", "b", claim(1.5, 1.4, 1.6, "reject")),
        ]
    )
    assert top.decision == "inconclusive" and top.effect.value == 0.95  # the copy workload's best, not random's
    assert decide_top([row("copy", "a", None, refused="no")]).decision == "blocked"


def test_a_greedy_mismatch_is_never_adopted_and_fails_quality():
    rows = [
        row("copy", "self-draft", claim(0.6, 0.5, 0.7, "adopt"), texts_ok=False),
        row("copy", "ngram-k2", claim(0.9, 0.85, 0.95, "adopt")),
    ]
    assert rows[0].decision == "reject (outputs differ)"
    top = decide_top(rows)
    assert top.mismatched == ["copy/self-draft"] and top.quality["passed"] is False
    assert top.quality["value"] == pytest.approx(7 / 8)
    # the primary row (first on copy) has differing outputs: never adopted, whatever the other rows show
    assert top.decision == "reject" and math.isclose(top.effect.value, 0.6)
    # a gain whose outputs differ still shows where it helps, marked, and is never the adopted headline
    assert (
        "helps (E2E p50 interval below 1): copy/self-draft (x0.60, outputs differ), copy/ngram-k2 (x0.90)" in top.lines
    )


def test_a_mismatched_primary_on_cross_start_evidence_reads_inconclusive_with_the_mismatch_named():
    # each variant on its own start: repeated evidence, and the result contract keeps reject for paired evidence
    repeated = replace(claim(0.6, 0.5, 0.7, "inconclusive"), evidence_level="repeated")
    top = decide_top([row("copy", "ngram-k2", repeated, texts_ok=False)])
    assert top.rows[0].decision == "reject (outputs differ)"
    assert top.decision == "inconclusive" and top.evidence_level == "repeated"
    assert "float32 greedy outputs differ from speculation off's on 1 of 4 requests: another computation, never " \
           "adopted" in top.summary


def test_speculation_the_engine_did_not_apply_is_not_read_as_an_effect():
    plain = row("copy", "ngram-k4", claim(1.0, 0.9, 1.1, "inconclusive"), counted=False)
    assert plain.decision == "not applied (no spec-decode counters)" and plain.effective_tokens is None
    runs = [run("copy/ngram-k4", 1, spec=SPEC_R1, generated=20)]
    applied = Row(**{**plain.__dict__, "acceptance": pooled_acceptance(runs, "copy/ngram-k4"), "requested_tokens": 4})
    assert applied.decision == "inconclusive" and applied.effective_tokens == 3
    assert applied.to_dict()["num_speculative_tokens"]["effective"] == 3
    assert any(
        "applied another draft length than asked: copy/ngram-k4 (requested 4, applied 3)" in line
        for line in decide_top([applied]).lines
    )
