"""Proposal-budget schedules with the semantics of Transformers assisted generation.

- ``constant``: draft ``num_assistant_tokens`` every pass.
- ``heuristic``: +2 when every draft was accepted, else -1 (floor 1); the value
  carries over from one generate() call to the next.
- ``heuristic_transient``: the same, reset to the initial value at each call.
- ``dynamic``: draft until the drafter's confidence for a token falls below
  ``assistant_confidence_threshold`` (that token included) (at most ``max_draft`` tokens); the
  threshold is re-chosen from the ROC of (confidence, accepted) pairs seen so
  far, minimising ``fpr + 3 * fnr`` as Transformers does.

Drafter confidence p is drawn from Beta(alpha*k, (1-alpha)*k) and a draft is
accepted with probability p, so the marginal acceptance rate is alpha for every
schedule. The heuristic's drift is zero where 2*alpha^K = 1 - alpha^K, i.e. it
settles where alpha^K = 1/3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import InvalidInput

SCHEDULES = ("constant", "heuristic", "heuristic_transient", "dynamic")
CONFIDENCE_CONCENTRATION = 4.0


@dataclass(frozen=True)
class ScheduleStats:
    schedule: str
    tokens: int
    target_passes: int
    drafted: int
    accepted: int
    mean_draft_len: float
    tokens_per_pass: float
    speedup: float
    final_threshold: float | None
    draft_lengths: tuple[int, ...]


def heuristic_fixed_point(alpha: float) -> float:
    """Draft length K where the heuristic schedule's expected change is zero: alpha^K = 1/3."""
    if not 0 < alpha < 1:
        raise InvalidInput(f"the heuristic fixed point needs 0 < alpha < 1, got {alpha}")
    return float(np.log(1 / 3) / np.log(alpha))


def roc_threshold(probs: list[float], matches: list[bool], current: float) -> float:
    """The confidence threshold minimising fpr + 3*fnr over the observed pairs (unchanged without both classes)."""
    if len(probs) < 6 or all(matches) or not any(matches):
        return current
    p = np.asarray(probs)
    m = np.asarray(matches, dtype=bool)
    order = np.argsort(-p, kind="stable")
    p_sorted, m_sorted = p[order], m[order]
    # drafting continues when p >= threshold: accepted drafts at or above it are true positives
    last_of_value = np.r_[p_sorted[1:] != p_sorted[:-1], True]
    tp = np.cumsum(m_sorted)[last_of_value]
    fp = np.cumsum(~m_sorted)[last_of_value]
    candidates = p_sorted[last_of_value]
    tpr, fpr = tp / m.sum(), fp / (~m).sum()
    return float(candidates[int(np.argmin(fpr + 3 * (1 - tpr)))])


def simulate_schedule(schedule: str, alpha: float, cost_ratio: float, *, calls: int = 20,
                      tokens_per_call: int = 128, seed: int = 0, initial: int = 5,
                      max_draft: int = 20, initial_threshold: float = 0.4) -> ScheduleStats:
    """Generate ``calls`` x ``tokens_per_call`` tokens with one schedule; count target passes and drafts."""
    if schedule not in SCHEDULES:
        raise InvalidInput(f"unknown schedule {schedule!r}", hint="one of " + ", ".join(SCHEDULES))
    if not 0 < alpha < 1:
        raise InvalidInput(f"alpha must be in (0, 1), got {alpha}")
    if initial < 1 or max_draft < initial or calls < 1 or tokens_per_call < 1:
        raise InvalidInput("need initial >= 1, max_draft >= initial, calls >= 1 and tokens_per_call >= 1")
    rng = np.random.default_rng(seed)
    k = CONFIDENCE_CONCENTRATION
    gamma, threshold = initial, initial_threshold
    probs: list[float] = []
    matches: list[bool] = []
    passes = drafted = accepted_total = produced = 0
    lengths: list[int] = []
    for _ in range(calls):
        if schedule == "heuristic_transient":
            gamma = initial
        left = tokens_per_call
        while left > 0:
            window = max_draft if schedule == "dynamic" else gamma
            p = rng.beta(alpha * k, (1 - alpha) * k, size=window)
            ok = rng.random(window) < p
            if schedule == "dynamic":
                below = np.nonzero(p < threshold)[0]
                # the low-confidence token is still drafted; drafting stops after it
                window = int(below[0]) + 1 if below.size else max_draft
                probs.extend(p[:window].tolist())
                matches.extend(ok[:window].tolist())
            window = min(window, left - 1)
            n_ok = window if ok[:window].all() else int(np.argmin(ok[:window]))
            passes += 1
            drafted += window
            accepted_total += n_ok
            step_tokens = min(n_ok + 1, left)
            produced += step_tokens
            left -= step_tokens
            lengths.append(window)
            if schedule in ("heuristic", "heuristic_transient"):
                gamma = gamma + 2 if n_ok == window and window == gamma else max(1, gamma - 1)
            elif schedule == "dynamic":
                threshold = roc_threshold(probs, matches, threshold)
    cost = passes + drafted * cost_ratio
    return ScheduleStats(
        schedule=schedule, tokens=produced, target_passes=passes, drafted=drafted, accepted=accepted_total,
        mean_draft_len=float(np.mean(lengths)), tokens_per_pass=produced / passes, speedup=produced / cost,
        final_threshold=threshold if schedule == "dynamic" else None, draft_lengths=tuple(lengths),
    )
