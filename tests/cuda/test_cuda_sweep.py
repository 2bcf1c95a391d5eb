"""OOM boundary, skip rule and inflection point on hand-made cells (no torch)."""

from __future__ import annotations

from harness.cuda.sweep import (
    Cell,
    boundary,
    dominated_by_oom,
    inflection,
)
from harness.models.shapes import kv_bytes_per_token_heads


def test_kv_formula_matches_published_configs():
    assert kv_bytes_per_token_heads(30, 3, 64, 2) == 23_040  # SmolLM2-135M, bf16
    assert kv_bytes_per_token_heads(32, 8, 128, 2) == 131_072  # Llama-3-8B, bf16


def test_oom_dominates_larger_cells_only():
    cells = [Cell(2, 256, "oom")]
    assert dominated_by_oom(4, 256, cells) == cells[0]
    assert dominated_by_oom(2, 512, cells) == cells[0]
    assert dominated_by_oom(4, 128, cells) is None
    assert dominated_by_oom(1, 1024, cells) is None


def test_boundary_reports_largest_fitting_cell_and_oom_cells():
    cells = [Cell(1, 64, "ok", 1.0), Cell(1, 128, "ok", 1.0), Cell(2, 64, "ok", 1.0), Cell(2, 128, "oom"),
             Cell(4, 64, "oom"), Cell(4, 128, "skipped")]
    b = boundary(cells)
    assert b["max_context_per_batch"] == {"1": 128, "2": 64, "4": None}
    assert b["oom_cells"] == [{"batch": 2, "context": 128}, {"batch": 4, "context": 64}]
    assert b["largest_fitting"] == {"batch": 2, "context": 64, "tokens": 128}  # tie on tokens: larger batch
    assert b["oom_seen"] is True


def test_inflection_is_first_batch_with_proportional_growth():
    # flat (memory-bound) up to batch 4, then time doubles with batch
    times = {1: 10.0, 2: 10.5, 4: 12.0, 8: 20.0, 16: 40.0}
    cells = [Cell(b, 128, "ok", t) for b, t in times.items()] + [Cell(b, 256, "ok", 10.0 + b * 0.01) for b in times]
    knee = inflection(cells)
    assert knee["per_context"]["128"]["inflection_batch"] == 8
    assert knee["per_context"]["256"]["inflection_batch"] is None
    assert knee["inflection_batch"] == 8 and knee["monotone"] is True
    first = knee["per_context"]["128"]["elasticities"][0]
    assert first["from_batch"] == 1 and abs(first["elasticity"] - 0.0704) < 1e-3


def test_inflection_flags_non_monotone_timings():
    cells = [Cell(1, 64, "ok", 10.0), Cell(2, 64, "ok", 25.0), Cell(4, 64, "ok", 12.0)]
    knee = inflection(cells)
    assert knee["per_context"]["64"]["inflection_batch"] == 2
    assert knee["monotone"] is False and knee["per_context"]["64"]["monotone"] is False
