"""Plots as PNG (matplotlib, headless), written atomically."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.contract.atomic import atomic_write_bytes
from harness.errors import CapabilityMissing


def cdf_png(series: Mapping[str, Sequence[float]], path: Path, *, title: str, xlabel: str,
            log_x: bool = True) -> Path:
    """Empirical CDF of each labelled sample set on one axis."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise CapabilityMissing("matplotlib is not installed", hint="pip install 'infkit[plots]'") from exc
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
    buf = io.BytesIO()
    # A fixed metadata block keeps the PNG free of the creation time.
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
