"""A claim on the requests a client stall left alone and again on every request: a decision stands when both agree.

An arm run whose client stalled names, in ``details.client.stalls`` (``harness.serving.stalls``), the requests whose
figures a stall (or their own late send) could move, per figure. A claim reads each run without the requests
excluded from the part its metric measures (``span_of``: TTFT the time to the first token, TPOT the decode, ITL the
chunk gaps, E2E the whole life, a rate the run), and a run invalid only by its stalls stays usable for every metric
whose part kept enough requests (``usable``). Where a claim left requests out, it is read again on every request of
the same runs, the excluded ones put back: the decision stands when both read the same, else it is capped at
inconclusive and the summary says what each read (``excluded_work``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from harness.bench.metrics import Metric
from harness.bench.records import ArmRun
from harness.contract import Effect, ExcludedWork
from harness.contract.result import Decision
from harness.serving.stalls import SPAN_TEXT, STALL_REASON

SPAN_OF_BASE = {"ttft_ms": "ttft", "ttft_from_scheduled_ms": "ttft", "queue_wait_client_ms": "ttft",
                "tpot_ms": "decode", "itl_ms": "chunks", "itl_token_ms": "chunks",
                "e2e_ms": "e2e", "e2e_from_scheduled_ms": "e2e"}
CAPPED = "inconclusive"  # what a decision that does not survive putting the excluded requests back is capped to


def span_of(metric: Metric) -> str:
    """The part of a request's life ``metric`` measures (a per-run figure: ``run``; an unknown per-request one: the
    whole life, the widest)."""
    if not metric.per_request:
        return "run"
    return SPAN_OF_BASE.get(metric.name.split(".")[0].split("[")[0], "e2e")


def stalls_of(run: ArmRun) -> dict[str, Any] | None:
    """The run's stall record where its client kept its loop's excursions, else None."""
    record = run.result.detail("client", "stalls")
    return record if isinstance(record, dict) and record.get("recorded") else None


def usable(run: ArmRun, metric: Metric | None = None) -> bool:
    """Completed with records and valid, or (for ``metric``) invalid only by client stalls that left enough of the
    part of a request's life the metric measures."""
    if run.failure or not run.records:
        return False
    if run.valid or metric is None:
        return run.valid
    record = stalls_of(run)
    reasons = run.result.conclusion.invalid_reasons
    return (record is not None and bool(reasons) and all(r.startswith(STALL_REASON) for r in reasons)
            and bool(record["valid_for"].get(span_of(metric))))


def excluded_indices(run: ArmRun, metric: Metric) -> dict[int, str]:
    """The requests of ``run`` left out of ``metric``, with why."""
    record, span = stalls_of(run), span_of(metric)
    if record is None or span == "run":
        return {}
    return {e["index"]: e["why"] for e in record["excluded"].get(span, [])}


def kept(run: ArmRun, metric: Metric) -> ArmRun:
    """``run`` without the requests excluded from ``metric``."""
    drop = excluded_indices(run, metric)
    return replace(run, records=tuple(r for r in run.records if r.index not in drop)) if drop else run


def excluded_names(pairs: Sequence[tuple[ArmRun, ArmRun]], metric: Metric) -> list[str]:
    """Each request the claim leaves out, named: ``<arm> repeat R request I (<part>): <why>``."""
    span = SPAN_TEXT[span_of(metric)]
    return [f"{run.label} repeat {run.repeat} request {i} ({span}): {why}"
            for pair in pairs for run in pair for i, why in sorted(excluded_indices(run, metric).items())]


def excluded_work(names: Sequence[str], kept_decision: str, all_decision: str, all_effect: Effect
                  ) -> tuple[ExcludedWork, str | None]:
    """The record of a claim read with and without its excluded requests, and the sentence that caps its decision
    (None when both read the same, or the kept reading decides nothing to cap)."""
    agree = kept_decision == all_decision
    consequence = (f"left out of the figures a client stall could move; on every request the claim reads "
                   f"{all_decision} too, so the decision stands" if agree else
                   f"left out of the figures a client stall could move; on every request the claim reads "
                   f"{all_decision}, on the kept ones {kept_decision}: the decision is capped at {CAPPED}")
    work = ExcludedWork(count=len(names), requests=list(names), consequence=consequence,
                        decision_all=cast(Decision, all_decision), decision_kept=cast(Decision, kept_decision),
                        effect_all=all_effect, agree=agree)
    if agree or kept_decision not in ("adopt", "reject"):
        return work, None
    return work, (f"capped at {CAPPED}: with the {len(names)} request(s) a client stall held put back it reads "
                  f"{all_decision} ({all_effect.value:.3f} [{all_effect.ci_low:.3f}, {all_effect.ci_high:.3f}]), "
                  f"without them {kept_decision}, so the decision rests on the exclusion")
