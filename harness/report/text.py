"""Formatting shared by the HTML page and the Markdown summary (one way to print a figure)."""

from __future__ import annotations

from typing import Any


def number(value: float | None) -> str:
    """A figure with sensible precision: 3 significant digits, thousands grouped from 1000."""
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def interval(item: dict[str, Any]) -> str:
    if "ci_low" in item and "ci_high" in item:
        return f"[{number(item['ci_low'])}, {number(item['ci_high'])}]"
    return ""


def headline_text(item: dict[str, Any]) -> str:
    """``name: value unit [low, high] (arm)`` on one line."""
    parts = [f"{item['name']}:", number(item["value"])]
    if item["unit"]:
        parts.append(item["unit"])
    if ci := interval(item):
        parts.append(ci)
    if item.get("arm"):
        parts.append(f"({item['arm']})")
    return " ".join(parts)


def change(row: dict[str, Any]) -> str:
    """The change of one headline figure from run a to run b."""
    if row["delta"] is None:
        return "—"
    ratio = f" (×{number(row['ratio'])})" if row["ratio"] is not None else ""
    sign = "+" if row["delta"] > 0 else ""
    return f"{sign}{number(row['delta'])}{ratio}"


def run_title(row: dict[str, Any]) -> str:
    if row["run_id"]:
        return row["run_id"] if row["identity_verified"] else f"{row['run_id']} (claimed)"
    return row["input"]


def like_text(row: dict[str, Any], reference: str | None) -> str:
    if row["like_for_like"] is None:
        return "—"
    if row["run_id"] == reference:
        return "reference"
    return "yes" if row["like_for_like"] else "no: " + "; ".join(row["not_like_for_like"])
