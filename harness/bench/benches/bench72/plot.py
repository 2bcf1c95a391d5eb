"""bench-72's figure: capacity per candidate with its interval, P99 TTFT and TPOT against rate for the top two."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.bench.benches.bench72.capacity import Searched
from harness.bench.benches.bench72.slo import SLO


def capacity_png(searched: Sequence[Searched], slo: SLO, path: Path, *, title: str) -> Path:
    """Capacity per candidate with its interval; P99 TTFT and TPOT against rate for the top two."""
    from harness.report.plots import log_y_axis, pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 4.4), dpi=110)
    ax = axes[0]
    for y, s in enumerate(searched):
        est = s.estimate
        if est is None or est.capacity_rps is None:
            ax.plot([0], [y], "x", color="grey")
            continue
        ax.plot([est.low_rps, est.high_rps], [y, y], "-", color="C0", lw=3, alpha=0.5)
        ax.plot([est.capacity_rps], [y], "o", color="C0")
    ax.set_yticks(range(len(searched)), [s.name for s in searched])
    ax.invert_yaxis()
    ax.set_xlabel("scheduled rate (req/s): fitted capacity (dot), 95 % interval (bar)")
    ax.set_title("capacity under the SLOs")
    ax.grid(True, alpha=0.3)
    for ax, key, limit, name in ((axes[1], "ttft_p99_ms", slo.ttft_p99_ms, "P99 TTFT (ms)"),
                                 (axes[2], "tpot_p99_ms", slo.tpot_p99_ms, "P99 TPOT (ms)")):
        for i, s in enumerate(searched[:2]):
            ok = sorted((p.rate_rps, p.detail[key]) for p in s.probes if p.passed and p.detail.get(key) is not None)
            bad = sorted((p.rate_rps, p.detail[key]) for p in s.probes
                         if not p.passed and p.detail.get(key) is not None)
            both = sorted(ok + bad)
            if both:
                ax.plot(*zip(*both, strict=True), "-", color=f"C{i}", alpha=0.4)
            if ok:
                ax.plot(*zip(*ok, strict=True), "o", color=f"C{i}", label=f"{s.name} pass")
            if bad:
                ax.plot(*zip(*bad, strict=True), "o", mfc="none", color=f"C{i}", label=f"{s.name} fail")
        ax.axhline(limit, color="red", lw=1, alpha=0.6, label="SLO")
        log_y_axis(ax, "offered Poisson rate (req/s)", f"{name}, log scale")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)
