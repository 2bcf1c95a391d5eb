"""The end of a paired serving bench: comparison.json, summary.txt, TTFT CDF, run.json, signed manifest."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from harness.contract import atomic_write_text, write_result
from harness.contract.result import utc_now
from harness.experiments.paired import ArmRun
from harness.manifest import sign_run
from harness.report.plots import cdf_png
from harness.runinfo import RunRecord, write_run_record


@dataclass(frozen=True)
class BenchOutputs:
    run_dir: Path
    comparison_path: Path
    summary_path: Path
    plot_path: Path | None
    manifest: Path | None
    summary: str


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _fmt(value: float | None, spec: str = ".0f", scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def arm_rows(runs: Sequence[ArmRun], labels: Sequence[str]) -> list[list[str]]:
    """One row per arm: pooled TTFT percentiles, per-repeat medians of the rest, hit rate, peak RSS."""
    by_label: dict[str, list[ArmRun]] = defaultdict(list)
    for run in runs:
        by_label[run.label].append(run)
    rows = []
    for label in labels:
        group = by_label.get(label, [])
        if not group:
            continue
        ttft = [v for r in group for v in r.samples_ms]
        perf = [r.result["performance"] for r in group]
        tpot = [p["tpot_ms"]["p50"] for p in perf if p.get("tpot_ms")]
        e2e = [p["e2e_ms"]["p50"] for p in perf if p.get("e2e_ms")]
        tok_s = [p["throughput"]["output_tokens_per_s"] for p in perf if p.get("throughput")]
        hits = [r.hit_rate for r in group if r.hit_rate is not None]
        peaks = [p["peak_memory_bytes"] for p in perf if p.get("peak_memory_bytes")]
        failed = sum(1 for r in group if r.failure)
        rows.append([
            label, f"{len(group)}{f' ({failed} failed)' if failed else ''}", len(ttft),
            _fmt(_median(ttft)), _fmt(float(np.percentile(ttft, 95)) if ttft else None),
            _fmt(_median(tpot), ".1f"), _fmt(_median(e2e)), _fmt(_median(tok_s), ".1f"),
            _fmt(float(np.mean(hits)) if hits else None, ".0%"), _fmt(max(peaks) if peaks else None, ".2f", 2**-30),
        ])
    return rows


HEADERS = ["arm", "repeats", "requests", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "E2E p50 ms",
           "out tok/s", "prefix hit rate", "peak RSS GiB"]


def effect_line(name: str, effect: dict[str, Any] | None, decision: str | None) -> str:
    if not effect:
        return f"{name}: no completed pair"
    return (f"{name}: {effect['arm_b']} / {effect['arm_a']} median TTFT = {effect['value']:.3f} "
            f"({effect['confidence']:.0%} CI [{effect['ci_low']:.3f}, {effect['ci_high']:.3f}], "
            f"{effect['n_pairs']} pairs){f' -> {decision}' if decision else ''}")


def summary_text(title: str, runs: Sequence[ArmRun], labels: Sequence[str], comparison: dict[str, Any],
                 wall_s: float) -> str:
    concl = comparison["conclusion"]
    control = comparison["details"].get("control") or {}
    lines = [title, "", tabulate(arm_rows(runs, labels), headers=HEADERS, tablefmt="github"), "",
             effect_line("effect", concl.get("effect"), concl["decision"]),
             effect_line("control", control.get("effect"), control.get("reading")),
             f"evidence: {concl['evidence_level']}; decision: {concl['decision']}; valid: {concl['valid']}"]
    if concl.get("failure"):
        lines.append(f"failure: {concl['failure']['kind']}: {concl['failure']['message']}")
    if concl.get("summary"):
        lines.append(f"why: {concl['summary']}")
    lines += [f"next step: {concl['next_step']}", f"wall time: {wall_s:.0f} s",
              "TTFT percentiles pool every repeat's requests (linear interpolation); TPOT/E2E/tok/s are medians of "
              "per-repeat values; hit rate = delta(prefix_cache_hits) / delta(prefix_cache_queries) per arm run."]
    return "\n".join(lines) + "\n"


def write_outputs(
    *, run_dir: Path, root: Path, title: str, runs: Sequence[ArmRun], labels: Sequence[str],
    comparison: dict[str, Any], record: RunRecord, wall_s: float,
    sign: bool,
) -> BenchOutputs:
    comparison_path = write_result(run_dir / "comparison.json", comparison)
    summary = summary_text(title, runs, labels, comparison, wall_s)
    summary_path = atomic_write_text(run_dir / "summary.txt", summary)
    series = {label: [v for r in runs if r.label == label for v in r.samples_ms] for label in labels}
    plot_path = None
    if any(series.values()):
        plot_path = cdf_png({k: v for k, v in series.items() if v}, run_dir / "ttft_cdf.png",
                            title=f"{title}: TTFT CDF (all repeats)", xlabel="TTFT (ms, log scale)")
    record.ended_utc = utc_now()
    write_run_record(run_dir, record)
    manifest = sign_run(run_dir, root=root) if sign else None
    return BenchOutputs(run_dir, comparison_path, summary_path, plot_path, manifest, summary)
