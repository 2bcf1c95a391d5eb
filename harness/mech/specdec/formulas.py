"""Speculative decoding formulas and a seeded Monte-Carlo of draft acceptance.

Notation follows Leviathan et al. (2023): acceptance rate alpha, draft length
gamma, draft/target cost ratio c. One target pass verifies gamma drafted tokens
and always yields one more (the correction or bonus token), so

    E[tokens per target pass] = (1 - alpha^(gamma+1)) / (1 - alpha)
    speedup                   = E / (gamma * c + 1)

With position-dependent acceptance alpha_1..alpha_gamma (drafts deeper in the
window are accepted less often), E = 1 + sum_k prod_{i<=k} alpha_i.
A tree draft with branching b_d at depth d accepts depth d when any of its b_d
candidates is accepted: alpha_d -> 1 - (1 - alpha_d)^b_d (children independent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import InvalidInput


def _check_alpha(alpha: float) -> None:
    if not 0 <= alpha <= 1:
        raise InvalidInput(f"acceptance rate must be in [0, 1], got {alpha}")


def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens produced per target pass for i.i.d. acceptance ``alpha`` and draft length ``gamma``."""
    _check_alpha(alpha)
    if gamma < 0:
        raise InvalidInput(f"draft length must be >= 0, got {gamma}")
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_tokens_positional(alphas: Sequence[float]) -> float:
    """Expected tokens per target pass when draft position k is accepted with probability ``alphas[k]``."""
    total, survive = 1.0, 1.0
    for a in alphas:
        _check_alpha(a)
        survive *= a
        total += survive
    return total


def speedup(expected: float, gamma: int, cost_ratio: float) -> float:
    """Walltime speedup over target-only decoding: E / (gamma * c + 1)."""
    if cost_ratio < 0:
        raise InvalidInput(f"draft cost ratio must be >= 0, got {cost_ratio}")
    return expected / (gamma * cost_ratio + 1)


def tree_alphas(alphas: Sequence[float], branching: Sequence[int]) -> list[float]:
    """Per-depth acceptance of a tree draft: any of ``branching[d]`` independent candidates accepted."""
    if len(alphas) != len(branching) or min(branching, default=1) < 1:
        raise InvalidInput("a tree draft needs one branching factor >= 1 per depth")
    return [1 - (1 - a) ** b for a, b in zip(alphas, branching, strict=True)]


def tree_nodes(branching: Sequence[int]) -> int:
    """Tokens the target verifies for a full tree: sum over depths of the product of branchings."""
    nodes, width = 0, 1
    for b in branching:
        width *= b
        nodes += width
    return nodes


@dataclass(frozen=True)
class MonteCarlo:
    mean_tokens: float
    stderr: float
    passes: int

    def within(self, expected: float, sigmas: float = 4.0) -> bool:
        return abs(self.mean_tokens - expected) <= sigmas * self.stderr + 1e-12


def simulate_acceptance(alphas: Sequence[float], passes: int, seed: int,
                        branching: Sequence[int] | None = None) -> MonteCarlo:
    """Draw ``passes`` verification passes; a pass yields (accepted prefix length + 1) tokens.

    With ``branching``, each depth draws that many independent candidates and
    continues when any is accepted.
    """
    if passes <= 0:
        raise InvalidInput(f"passes must be positive, got {passes}")
    rng = np.random.default_rng(seed)
    gamma = len(alphas)
    widths = list(branching) if branching is not None else [1] * gamma
    if len(widths) != gamma:
        raise InvalidInput("branching must have one entry per draft position")
    accepted = np.ones((passes, gamma), dtype=bool)
    for d, (a, b) in enumerate(zip(alphas, widths, strict=True)):
        _check_alpha(a)
        accepted[:, d] = (rng.random((passes, b)) < a).any(axis=1)
    # the accepted prefix ends at the first rejection
    prefix = np.where(accepted.all(axis=1), gamma, np.argmin(accepted, axis=1)) if gamma else np.zeros(passes)
    tokens = prefix + 1
    return MonteCarlo(float(tokens.mean()), float(tokens.std(ddof=1) / math.sqrt(passes)) if passes > 1 else 0.0,
                      passes)


@dataclass(frozen=True)
class Topology:
    """A drafter as a parameter set: per-position acceptance, tree shape and cost ratio.

    ``parallel`` drafters (DFlash/DSpark-style) emit the whole window in one
    draft pass, so their cost is ``c`` per target pass instead of ``gamma * c``.
    Figures are illustrative defaults, not measurements; override them per model.
    """

    name: str
    alphas: tuple[float, ...]
    cost_ratio: float
    branching: tuple[int, ...] | None = None
    parallel: bool = False

    def expected(self) -> float:
        alphas = tree_alphas(self.alphas, self.branching) if self.branching else list(self.alphas)
        return expected_tokens_positional(alphas)

    def draft_cost(self) -> float:
        return self.cost_ratio if self.parallel else len(self.alphas) * self.cost_ratio

    def speedup(self) -> float:
        return self.expected() / (self.draft_cost() + 1)


TOPOLOGIES: dict[str, Topology] = {
    t.name: t
    for t in (
        Topology("draft-model", (0.75,) * 5, 0.10),
        Topology("n-gram", (0.55, 0.5, 0.45, 0.4), 0.0),
        Topology("mtp", (0.85,), 0.05),
        Topology("eagle", (0.8, 0.72, 0.65, 0.58, 0.52), 0.04, branching=(4, 2, 2, 1, 1)),
        Topology("parallel-draft", (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1), 0.08, parallel=True),
    )
}


def get_topology(name: str) -> Topology:
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise InvalidInput(f"unknown draft topology {name!r}", hint="one of " + ", ".join(TOPOLOGIES)) from None
