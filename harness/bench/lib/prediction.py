"""Predictions held to the measurement: inside the measured figure's interval or not, and errors across arms.

A prediction is judged against each measured figure's own interval (a point error inside the measurement's
sampling error says nothing); across arms the errors are summarised as the mean signed error (bias) and the mean
absolute percentage error (MAPE), with how many predictions fell inside their interval. Rows a bench excludes
(e.g. outputs that diverged, or the arm a constant was fitted on) are listed, not averaged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Judged:
    name: str
    predicted: float
    measured: float
    low: float | None  # the measured figure's interval
    high: float | None
    excluded: str = ""  # why the row is left out of the summary ("" when it counts)

    @property
    def error(self) -> float:
        """predicted / measured - 1 (signed: > 0 over-predicts)."""
        return self.predicted / self.measured - 1 if self.measured else float("nan")

    @property
    def inside(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low <= self.predicted <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": round(self.error, 6), "inside_interval": self.inside}


def summarise(rows: Sequence[Judged]) -> dict[str, Any]:
    """Mean signed error, MAPE and the inside count over the rows that count."""
    used = [r for r in rows if not r.excluded]
    if not used:
        return {"n": 0, "mean_signed_error": None, "mape": None, "inside": 0,
                "excluded": {r.name: r.excluded for r in rows}}
    errors = [r.error for r in used]
    return {"n": len(used), "mean_signed_error": round(sum(errors) / len(errors), 6),
            "mape": round(sum(abs(e) for e in errors) / len(errors), 6),
            "inside": sum(r.inside is True for r in used), "with_interval": sum(r.inside is not None for r in used),
            "excluded": {r.name: r.excluded for r in rows if r.excluded}}


def summary_line(what: str, summary: dict[str, Any]) -> str:
    if not summary["n"]:
        return f"{what}: no prediction to judge"
    excluded = f"; left out: {', '.join(f'{k} ({v})' for k, v in summary['excluded'].items())}" \
        if summary["excluded"] else ""
    return (f"{what}: {summary['inside']}/{summary['with_interval']} inside the measured interval; mean signed "
            f"error (predicted / measured - 1) {summary['mean_signed_error']:+.1%}, MAPE {summary['mape']:.1%} over "
            f"{summary['n']}{excluded}")

