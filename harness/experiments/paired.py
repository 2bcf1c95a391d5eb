"""The paired A/B runner: interleaved arm runs and the comparison result built from them.

Protocol (stated in every comparison's details): arms run A B A B … for R
repeats on the same server and workloads; a warm-up precedes the first arm on
each server start; before every arm run the server's prefix cache is reset, so
each arm starts from an empty cache and only its own requests can hit. A
failed arm run (e.g. the server died) stops the schedule; what completed is
kept and the comparison's decision is blocked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import (
    Conclusion,
    Correctness,
    Effect,
    Environment,
    Failure,
    Identity,
    Performance,
    WorkloadInfo,
    build_result,
)
from harness.experiments.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    NO_EFFECT_RATIO,
    decide,
    paired_ratio_effect,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ArmRun:
    """One arm × repeat: its result document and the compared metric's samples."""

    label: str
    repeat: int
    result_path: Path
    result: dict[str, Any]
    samples_ms: tuple[float, ...]
    hit_rate: float | None = None
    server: str = ""

    @property
    def failure(self) -> dict[str, Any] | None:
        return self.result["conclusion"].get("failure")


@dataclass(frozen=True)
class Protocol:
    repeats: int
    warmup_requests: int
    reset_prefix_cache: bool = True
    order: str = "interleaved A B A B …"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"repeats": self.repeats, "order": self.order, "warmup_requests_per_server_start": self.warmup_requests,
                "prefix_cache_reset_before_each_arm_run": self.reset_prefix_cache, "notes": list(self.notes)}


def interleaved(arms: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, arm) in run order: A B A B … for ``repeats`` rounds."""
    return [(r, arm) for r in range(1, repeats + 1) for arm in arms]


def run_schedule(
    schedule: Sequence[tuple[int, str]],
    run_one: Callable[[str, int], ArmRun],
    *,
    before_each: Callable[[str, int], None] | None = None,
    progress: Progress = print,
    into: list[ArmRun] | None = None,
) -> list[ArmRun]:
    """Run arms in schedule order; stop at the first failed run (it is returned too).

    Each finished run is appended to ``into`` (a new list by default) as soon as it ends,
    so a caller interrupted mid-schedule still holds every completed run.
    """
    runs: list[ArmRun] = [] if into is None else into
    for i, (repeat, arm) in enumerate(schedule, 1):
        if before_each:
            before_each(arm, repeat)
        progress(f"[{i}/{len(schedule)}] {arm} repeat {repeat}")
        run = run_one(arm, repeat)
        runs.append(run)
        if run.failure:
            progress(f"  {arm} repeat {repeat} failed: {run.failure['kind']}: {run.failure['message']}")
            break
        med = sorted(run.samples_ms)[len(run.samples_ms) // 2] if run.samples_ms else float("nan")
        hit = "n/a" if run.hit_rate is None else f"{run.hit_rate:.0%}"
        progress(f"  {len(run.samples_ms)} requests, median TTFT {med:.0f} ms, prefix-cache hit rate {hit}")
    return runs


def pairs_of(runs: Sequence[ArmRun], arm_a: str, arm_b: str) -> list[tuple[list[float], list[float]]]:
    """Per-repeat (A samples, B samples) for repeats where both arms completed without failure."""
    by_key = {(r.label, r.repeat): r for r in runs if not r.failure and r.samples_ms}
    repeats = sorted({r.repeat for r in runs})
    return [(list(by_key[(arm_a, k)].samples_ms), list(by_key[(arm_b, k)].samples_ms))
            for k in repeats if (arm_a, k) in by_key and (arm_b, k) in by_key]


def _first_failure(runs: Sequence[ArmRun]) -> tuple[ArmRun, dict[str, Any]] | None:
    for run in runs:
        if run.failure:
            return run, run.failure
    return None


def effect_of(runs: Sequence[ArmRun], arm_a: str, arm_b: str, *, seed: int,
              resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any] | None:
    """Effect of B over A with its verdict, or None without a completed pair."""
    pairs = pairs_of(runs, arm_a, arm_b)
    if not pairs:
        return None
    eff = paired_ratio_effect(pairs, confidence=confidence, resamples=resamples, seed=seed)
    verdict = decide(eff, better="lower")
    effect = Effect(metric="ttft_ms.p50", estimator="ratio_of_medians (B/A), geometric mean over repeats",
                    value=eff.value, ci_low=eff.ci_low, ci_high=eff.ci_high, confidence=eff.confidence,
                    no_effect=NO_EFFECT_RATIO, better="lower", method=eff.method, n_pairs=eff.n_pairs,
                    arm_a=arm_a, arm_b=arm_b)
    return {"effect": effect, "verdict": verdict, "per_repeat_ratio": list(eff.per_repeat)}


def build_comparison(
    runs: Sequence[ArmRun],
    *,
    arm_a: str,
    arm_b: str,
    semantic_id: str,
    run_id: str,
    protocol: Protocol,
    seed: int,
    next_steps: dict[str, str],
    details: dict[str, Any] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    failure: Failure | None = None,
) -> dict[str, Any]:
    """The ``kind: comparison`` result of B against A (validated, not yet written).

    ``failure`` blocks the decision for a cause outside the arm runs (e.g. a server that did not start).
    """
    reference = next((r.result for r in runs if r.label == arm_b), runs[0].result)
    ident = dict(reference["identity"])
    ident.update(run_label=f"{arm_b} vs {arm_a}", run_id=run_id)
    ident.pop("created_utc", None)
    workload = dict(reference["workload"], repeats=protocol.repeats)
    found = effect_of(runs, arm_a, arm_b, seed=seed, resamples=resamples)
    failed = _first_failure(runs)
    if failed:
        run, first = failed
        blocking: tuple[str, Failure] | None = (f"{run.label} repeat {run.repeat}: {first['kind']}", Failure(**first))
    else:
        blocking = (f"{failure.stage}: {failure.kind}", failure) if failure else None
    effect = found["effect"] if found else None
    if blocking:
        reason, cause = blocking
        conclusion = Conclusion(
            evidence_level="single", decision="blocked", next_step=next_steps.get(cause.kind, next_steps["blocked"]),
            failure=cause, valid=False, invalid_reasons=[reason], repeats=protocol.repeats,
            effect=effect, summary=f"blocked: {reason}; completed pairs are kept but no claim is made")
    elif found is None:
        conclusion = Conclusion(evidence_level="precheck", decision="blocked", next_step=next_steps["blocked"],
                                failure=Failure(stage="report", kind="error", message="no completed A/B pair"),
                                valid=False, invalid_reasons=["no completed A/B pair"])
    else:
        verdict = found["verdict"]
        conclusion = Conclusion(
            evidence_level=verdict.evidence_level, decision=verdict.decision,
            next_step=next_steps[verdict.decision], repeats=protocol.repeats, effect=effect,
            summary=(f"{arm_b} median TTFT is {effect.value:.3f}x {arm_a} ({verdict.reason}): {verdict.decision}"))
    terminations: Counter[str] = Counter()
    for run in runs:
        terminations.update(run.result["correctness"]["termination_counts"])
    outputs = sum(run.result["correctness"]["output_count"] for run in runs)
    return build_result(
        kind="comparison",
        identity=Identity(**ident),
        workload=WorkloadInfo(**workload),
        environment=Environment(**reference["environment"]),
        performance=Performance.not_applicable("a comparison; per-arm distributions are in the arm results"),
        correctness=Correctness(output_count=outputs, termination_counts=dict(terminations), quality=None,
                                null_reasons={"quality": "no reference outputs for this workload"}),
        conclusion=conclusion,
        details={
            "protocol": protocol.to_dict(),
            "per_repeat_ratio": found["per_repeat_ratio"] if found else [],
            "arm_runs": [{"label": r.label, "repeat": r.repeat, "server": r.server,
                          "result": str(r.result_path), "requests_completed": len(r.samples_ms),
                          "prefix_cache_hit_rate": r.hit_rate,
                          "failure": r.failure["kind"] if r.failure else None} for r in runs],
            **(details or {}),
        },
    )
