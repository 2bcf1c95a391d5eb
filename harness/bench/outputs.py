"""What people read at the end of a bench: the arm table (columns are named metrics) and summary.txt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from harness.bench.metrics import Metric
from harness.bench.records import ArmRun, Reading
from harness.contract.result import Result
from harness.contract.verdict import verdict_lines

FOOTNOTE = ("Per-request metrics (TTFT, TPOT, E2E, ITL) pool every repeat's completed requests (linear "
            "interpolation); per-run metrics (tok/s, hit rate, memory) are medians of the repeats' values.")


def arm_rows(runs: Sequence[ArmRun], labels: Sequence[str], columns: Sequence[Metric]) -> list[list[Any]]:
    """One row per arm label that ran: repeats (failed ones counted), requests, then each metric."""
    rows = []
    for label in labels:
        group = [r for r in runs if r.label == label]
        if not group:
            continue
        done = [r for r in group if not r.failure and r.records]
        failed = sum(1 for r in group if r.failure)
        invalid = sum(1 for r in group if not r.valid and not r.failure)
        notes = ", ".join(filter(None, [f"{failed} failed" if failed else "", f"{invalid} invalid" if invalid else ""]))
        rows.append([label, f"{len(group)}{f' ({notes})' if notes else ''}", sum(r.completed for r in done),
                     *(m.format(m.value(done)) for m in columns)])
    return rows


def arm_table(runs: Sequence[ArmRun], labels: Sequence[str], columns: Sequence[Metric]) -> str:
    headers = ["arm", "repeats", "requests", *(m.title for m in columns)]
    return tabulate(arm_rows(runs, labels, columns), headers=headers, tablefmt="github")


def summary_text(title: str, table: str, reading: Reading, result: Result, wall_s: float) -> str:
    """Verdict first (``harness.contract.verdict``), then the arm table, the reading's lines and the wall time. A
    reading that measures rather than decides (a sweep, a start variance) leads with its figure."""
    concl = result.conclusion.to_dict()
    figure = result.conclusion.summary if reading.measures else None
    controls = result.detail("controls") or []
    invalid = [f"{r['arm']} repeat {r['repeat']} ({r['consequence']}): {'; '.join(r['reasons'])}"
               for r in reading.invalid_runs]
    lines = [*verdict_lines(title, concl, figure=figure, controls=controls, invalid=invalid,
                            recommendations=reading.recommendations), f"wall time: {wall_s:.0f} s", "",
             table, "", *reading.lines, "", FOOTNOTE]
    return "\n".join(lines) + "\n"
