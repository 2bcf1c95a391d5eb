"""``infkit bench --all``: the project exits one after another, then one table of what each did.

Every bench runs even when an earlier one fails (a failure is a row, not the end); Ctrl-C stops the suite. The
table gives each bench's wall time, its run directory and the decision its ``run.json`` records.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.bench.spec import BenchConfig
from harness.errors import InfkitError, InvalidInput
from harness.rundir.record import RUN_FILE, read_run_record

# The citing order: a later bench cites an earlier one's signed run (bench-66's capacity before 72 and 81).
EXITS = ("69", "66", "68", "70", "72", "81")
START_CONTROL = "00"  # bench-00: the start-to-start variance that the cross-start claims of 68, 70 and 72 pool
INTERRUPTED = 130

# One bench run: (exit status, the run directory it made or None).
RunOne = Callable[[str], tuple[int, Path | None]]


@dataclass(frozen=True)
class SuiteRow:
    """What one bench of the suite did."""

    bench: str
    wall_s: float
    exit_code: int
    run_dir: Path | None
    decision: str


def decision_of(run_dir: Path | None) -> str:
    """The decision a run directory's ``run.json`` records, or why there is none (a file it cannot read: the file
    and the field, in one line)."""
    if run_dir is None:
        return "no run"
    if not (run_dir / RUN_FILE).is_file():
        return "no run.json"
    try:
        return read_run_record(run_dir).decision
    except InvalidInput as exc:
        return f"unreadable: {exc.message}"


def start_control_first(exits: Sequence[str], crossing: Mapping[str, BenchConfig],
                        pooled_here: Callable[[BenchConfig], str | None]) -> tuple[list[str], str]:
    """The exits with bench-00 in front when a bench of them (``crossing``: those comparing arms across server
    starts, with their settings) would pool no bench-00 run on this host key (``pooled_here`` is None), and the
    line that says so; else the exits as they are. A bench told ``--aa-control none`` or a path cites no pool."""
    if START_CONTROL in exits:
        return list(exits), ""
    missing = [name for name, cfg in crossing.items() if cfg.aa_control == "latest" and pooled_here(cfg) is None]
    if not missing:
        return list(exits), ""
    return [START_CONTROL, *exits], (
        f"bench-{START_CONTROL} runs first: {', '.join(f'bench-{n}' for n in missing)} compare(s) arms across "
        "server starts and no bench-00 run on this host key is there to pool (AA_CONTROL=none skips it)")


def run_suite(exits: Sequence[str], run_one: RunOne, *, clock: Callable[[], float] = time.monotonic) -> list[SuiteRow]:
    """Run each bench in turn; a bench that fails or raises a user error is a row, and the next one runs."""
    rows: list[SuiteRow] = []
    for name in exits:
        started = clock()
        try:
            code, run_dir = run_one(name)
        except InfkitError as exc:
            print(f"bench-{name}: error: {exc}", file=sys.stderr)
            code, run_dir = exc.exit_code, None
        rows.append(SuiteRow(name, clock() - started, code, run_dir, decision_of(run_dir)))
        if code == INTERRUPTED:
            break
    return rows


def suite_table(exits: Sequence[str], rows: Sequence[SuiteRow]) -> str:
    """The table printed at the end: one line per bench (wall time, exit status, run directory, decision)."""
    shown = [(f"bench-{r.bench}", f"{r.wall_s:.0f} s", "ok" if r.exit_code == 0 else f"exit {r.exit_code}",
              str(r.run_dir) if r.run_dir else "no run", r.decision) for r in rows]
    head = ("bench", "wall", "status", "run directory", "decision")
    widths = [max(len(row[i]) for row in [head, *shown]) for i in range(len(head))]
    lines = [f"benches-all: {' '.join(exits)}"]
    for row in [head, *shown]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    skipped = list(exits)[len(rows):]
    if skipped:
        lines.append(f"not run (interrupted): {' '.join(f'bench-{n}' for n in skipped)}")
    return "\n".join(lines) + "\n"


def suite_exit_code(rows: Sequence[SuiteRow]) -> int:
    """0 when every bench succeeded; 130 when interrupted; else 1."""
    codes = [r.exit_code for r in rows]
    if INTERRUPTED in codes:
        return INTERRUPTED
    return 0 if all(c == 0 for c in codes) else 1
