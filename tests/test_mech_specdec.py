"""Speculative decoding: closed forms, Monte-Carlo convergence, tree drafts, proposal schedules."""

from __future__ import annotations

import math

import pytest

from harness.errors import InvalidInput
from harness.mech.specdec.formulas import (
    TOPOLOGIES,
    expected_tokens,
    expected_tokens_positional,
    simulate_acceptance,
    speedup,
    tree_alphas,
    tree_nodes,
)
from harness.mech.specdec.mechanism import SpecDecConfig, run
from harness.mech.specdec.proposal import (
    SCHEDULES,
    heuristic_fixed_point,
    roc_threshold,
    simulate_schedule,
)


def test_expected_tokens_hand_computed() -> None:
    assert expected_tokens(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)  # 3.3616
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(1.0, 5) == 6
    assert expected_tokens(0.0, 7) == 1
    assert expected_tokens_positional([0.8] * 4) == pytest.approx(expected_tokens(0.8, 4))
    assert expected_tokens_positional([0.9, 0.5]) == pytest.approx(1 + 0.9 + 0.45)


def test_speedup_leviathan() -> None:
    # Leviathan et al.: alpha 0.8, gamma 4, c 0.05 -> 3.3616 / 1.2
    assert speedup(expected_tokens(0.8, 4), 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert speedup(2.0, 3, 0.0) == 2.0


@pytest.mark.parametrize(("alphas", "branching"), [
    ([0.7] * 5, None),
    ([0.9, 0.8, 0.6, 0.4], None),
    ([0.6, 0.5, 0.4], [3, 2, 1]),
])
def test_monte_carlo_converges_to_closed_form(alphas: list[float], branching: list[int] | None) -> None:
    closed = expected_tokens_positional(tree_alphas(alphas, branching) if branching else alphas)
    mc = simulate_acceptance(alphas, 40_000, seed=3, branching=branching)
    assert mc.within(closed, sigmas=4.0), (mc, closed)
    assert mc.stderr < 0.02


def test_monte_carlo_is_seeded() -> None:
    assert simulate_acceptance([0.7] * 3, 1000, seed=5) == simulate_acceptance([0.7] * 3, 1000, seed=5)


def test_tree_shapes() -> None:
    assert tree_alphas([0.5], [2]) == [0.75]
    assert tree_nodes([4, 2, 1]) == 4 + 8 + 8
    assert TOPOLOGIES["eagle"].expected() > expected_tokens_positional(TOPOLOGIES["eagle"].alphas)
    par = TOPOLOGIES["parallel-draft"]
    assert par.draft_cost() == par.cost_ratio


@pytest.mark.parametrize("alpha", [0.6, 0.8, 0.9])
def test_heuristic_schedule_settles_where_alpha_to_the_k_is_one_third(alpha: float) -> None:
    k_star = heuristic_fixed_point(alpha)
    assert alpha**k_star == pytest.approx(1 / 3)
    stats = simulate_schedule("heuristic", alpha, 0.1, calls=1, tokens_per_call=100_000, seed=11)
    # the +2/-1 walk fluctuates around K*; its long-run mean stays within one step of it
    assert abs(stats.mean_draft_len - k_star) < 1.0
    assert 0.2 < alpha**stats.mean_draft_len < 0.45


def test_constant_schedule_matches_formula() -> None:
    stats = simulate_schedule("constant", 0.7, 0.0, calls=1, tokens_per_call=200_000, seed=2, initial=4)
    # only the end of the single call truncates a window
    assert stats.tokens_per_pass == pytest.approx(expected_tokens(0.7, 4), rel=0.02)


def test_transient_resets_per_call_and_persistent_does_not() -> None:
    persistent = simulate_schedule("heuristic", 0.95, 0.1, calls=5, tokens_per_call=64, seed=1)
    transient = simulate_schedule("heuristic_transient", 0.95, 0.1, calls=5, tokens_per_call=64, seed=1)
    assert persistent.draft_lengths[0] == transient.draft_lengths[0] == 5
    assert max(persistent.draft_lengths) > max(transient.draft_lengths)


def test_dynamic_threshold_adapts() -> None:
    stats = simulate_schedule("dynamic", 0.6, 0.1, calls=10, tokens_per_call=128, seed=4)
    assert stats.final_threshold is not None and stats.final_threshold != 0.4


def test_roc_threshold_separates_classes() -> None:
    probs = [0.9, 0.85, 0.8, 0.2, 0.15, 0.1]
    matches = [True, True, True, False, False, False]
    assert roc_threshold(probs, matches, 0.4) == 0.8
    assert roc_threshold(probs[:3], matches[:3], 0.4) == 0.4  # too few / one class: unchanged


def test_run_result_and_all_schedules() -> None:
    out = run(SpecDecConfig(passes=2000, alphas=(0.6, 0.8), gammas=(1, 4)))
    assert out.correctness.quality["passed"] is True
    assert [r["schedule"] for r in out.details["schedules"]] == list(SCHEDULES)
    assert out.details["heuristic_fixed_point"] == pytest.approx(math.log(1 / 3) / math.log(0.8), abs=1e-6)


@pytest.mark.parametrize("call", [
    lambda: expected_tokens(1.2, 3),
    lambda: expected_tokens(0.5, -1),
    lambda: speedup(2.0, 3, -0.1),
    lambda: simulate_acceptance([0.5], 0, seed=0),
    lambda: simulate_schedule("sometimes", 0.5, 0.1),
    lambda: SpecDecConfig(topologies=("warp-drive",)),
])
def test_invalid_inputs(call) -> None:
    with pytest.raises(InvalidInput):
        call()
