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
