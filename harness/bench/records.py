"""The records every part of a bench shares: the workloads it made, its arm runs, and its reading.

They sit below the spec, the runner and the analysis so that none of those imports another
to name them; a ``Reading`` is frozen and changes only through its named copies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.client import RequestRecord
from harness.contract import Effect, ExcludedWork, Failure, Result


@dataclass(frozen=True)
class Workload:
    """A workload file the bench made, by its content id."""

    path: Path
    workload_id: str
    requests: int


@dataclass(frozen=True)
class ArmRun:
    """One arm × repeat: its result (read once through the typed groups that wrote it) and its per-request records."""

    label: str
    repeat: int
    result_path: Path
    result: Result
    records: tuple[RequestRecord, ...]
    server: str = ""
    workload: str = ""
    seconds: float = 0.0

    @property
    def failure(self) -> Failure | None:
        return self.result.conclusion.failure

    @property
    def valid(self) -> bool:
        return self.result.conclusion.valid

    @property
    def completed(self) -> int:
        return sum(r.completed for r in self.records)


def completed_runs(runs: Sequence[ArmRun], label: str) -> list[ArmRun]:
    return [r for r in runs if r.label == label and not r.failure and r.records]


@dataclass(frozen=True)
class Reading:
    """A bench's conclusion and what goes with it into the result, the summary and the figures."""

    evidence_level: str
    decision: str
    summary: str
    effect: Effect | None = None
    repeats: int | None = None
    failure: Failure | None = None
    invalid_reasons: Sequence[str] = ()  # these sequences are kept as tuples (__post_init__), from any sequence
    details: Mapping[str, Any] = field(default_factory=dict)
    lines: Sequence[str] = ()  # summary.txt, after the arm table
    figures: Mapping[str, Callable[[Path], Any]] = field(default_factory=dict)
    headline: Sequence[dict[str, Any]] = ()
    kind: str = "comparison"
    quality: dict[str, Any] | None = None  # the correctness group's quality (e.g. greedy agreement), when checked
    next_step: str | None = None  # a read rule's own next step (else the spec's, by decision)
    # each invalid arm run (arm, repeat, reasons, consequence) and one recommendation per failed constraint
    # (``harness.bench.invalid.named``)
    invalid_runs: Sequence[dict[str, Any]] = ()
    recommendations: Sequence[str] = ()
    excluded_work: ExcludedWork | None = None  # the primary claim's requests a client stall held, read with them
    measures: bool = False  # it measures rather than decides (a curve, a start variance): its summary leads
    # with its figure; a sweep always measures

    def __post_init__(self) -> None:  # lists given by a read rule are kept as tuples: the reading cannot drift
        for name in ("invalid_reasons", "lines", "headline", "invalid_runs", "recommendations"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.kind == "sweep":
            object.__setattr__(self, "measures", True)

    def blocked_by(self, failure: Failure) -> Reading:
        """What a read rule concluded, stopped by ``failure``: blocked, single, the spec's next step."""
        if self.failure is not None:
            return self
        return replace(self, failure=failure, decision="blocked", evidence_level="single", next_step=None,
                       invalid_reasons=self.invalid_reasons or (f"{failure.stage}: {failure.kind}",),
                       summary=f"{failure.kind}: {failure.message}; read so far: {self.summary}")

    def with_figures(self, figures: Mapping[str, Callable[[Path], Any]]) -> Reading:
        return replace(self, figures={**self.figures, **figures})

    def with_details(self, **details: Any) -> Reading:
        return replace(self, details={**self.details, **details})

    def with_lines(self, *lines: str) -> Reading:
        return replace(self, lines=(*self.lines, *lines))

    def with_capability_missing(self, refused: Mapping[str, str]) -> Reading:
        """Server variants the engine refused, in the details and the summary lines."""
        if not refused:
            return self
        missing = {**self.details.get("capability_missing", {}), **refused}
        lines = [f"capability_missing: server variant {name} (its arms did not run): {message.splitlines()[0]}"
                 for name, message in refused.items()]
        return self.with_details(capability_missing=missing).with_lines(*lines)

    def capped_by(self, violations: list[str]) -> Reading:
        """Protocol violations make the reading invalid and cap an adopt/reject at inconclusive."""
        if not violations:
            return self
        capped = self.decision in ("adopt", "reject")
        return replace(self, invalid_reasons=(*self.invalid_reasons, *violations),
                       decision="inconclusive" if capped else self.decision,
                       summary=f"{self.summary}; capped: {violations[0]}" if capped else self.summary)
