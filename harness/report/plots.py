"""Plots as PNG (matplotlib, headless), written atomically."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.contract.atomic import atomic_write_bytes
from harness.errors import CapabilityMissing


def pyplot():
    """matplotlib.pyplot on the headless Agg backend, or a clear CapabilityMissing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise CapabilityMissing("matplotlib is not installed", hint="pip install 'infkit[plots]'") from exc
    return plt


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """Write a figure as PNG atomically and close it; no creation time in the file's metadata."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None}, **savefig)
    pyplot().close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def log_y_axis(ax: Any, xlabel: str, ylabel: str) -> None:
    """A latency axis: log-scale y, labels, grid on both scales and a small legend."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def cdf_png(series: Mapping[str, Sequence[float]], path: Path, *, title: str, xlabel: str,
            log_x: bool = True) -> Path:
    """Empirical CDF of each labelled sample set on one axis."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    for label, values in series.items():
        xs = np.sort(np.asarray(values, dtype=float))
        if xs.size == 0:
            continue
        ys = np.arange(1, xs.size + 1) / xs.size
        ax.step(xs, ys, where="post", label=f"{label} (n={xs.size}, p50={np.median(xs):.0f})")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def interval_png(points: Sequence[tuple[str, float, float | None, float | None]], path: Path, *, title: str,
                 xlabel: str, reference: float | None = None) -> Path:
    """One value per labelled row with its interval as an error bar (e.g. a bench's effect across
    runs), rows top to bottom in the given order; ``reference`` draws the no-effect line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 2.2 + 0.4 * len(points)), dpi=120)
    ys = np.arange(len(points))[::-1]
    for y, (_, value, low, high) in zip(ys, points, strict=True):
        if low is not None and high is not None:
            ax.errorbar([value], [y], xerr=[[value - low], [high - value]], fmt="o", color="C0", capsize=4)
        else:
            ax.plot([value], [y], "o", color="C0", markerfacecolor="white")
    if reference is not None:
        ax.axvline(reference, color="0.4", linestyle="--", linewidth=1, label=f"no effect ({reference:g})")
        ax.legend(loc="best", fontsize=8)
    ax.set_yticks(ys, [label for label, *_ in points], fontsize=8)
    ax.set_ylim(-0.7, len(points) - 0.3)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)
