"""report.json (schemas/report.schema.json): one row per input, grouped by bench, with diffs.

The HTML page and the Markdown summary are both rendered from this document, so the three
outputs cannot disagree. An INVALID input's row carries its reasons and no number (the
schema enforces it).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import __version__
from harness.manifest.subjects import unsafe_name_reason
from harness.report.compare import (
    Comparability,
    comparability,
    environment_diff,
    overridden_settings,
    result_diff,
)
from harness.report.inputs import AuditedInput
from harness.report.reader import RunView

REPORT_SCHEMA = "infkit/report/v1"
UNPLACED = None  # the bench key of inputs that name no bench


@dataclass(frozen=True)
class Placed:
    """An input with its view when VALID (views are only ever built from VALID inputs)."""

    item: AuditedInput
    view: RunView | None


def relative_link(target: Path, out_dir: Path) -> str:
    """``target`` relative to the report directory, as a POSIX path for href/Markdown links."""
    return Path(os.path.relpath(os.path.realpath(target), os.path.realpath(out_dir))).as_posix()


def _links(placed: Placed, root: Path, out_dir: Path) -> dict[str, str | None]:
    item, view = placed.item, placed.view
    run_dir = ((item.audit.predicate or {}).get("run_dir") if item.audit else None)
    # An INVALID manifest's run_dir is unverified: link it only when it is a plain path under the root.
    in_root = run_dir if unsafe_name_reason(run_dir) is None and (root / run_dir).is_dir() else None
    return {
        "manifest": relative_link(item.manifest, out_dir) if item.manifest else None,
        "run_dir": relative_link(root / in_root, out_dir) if in_root else None,
        "result": relative_link(root / view.result_name, out_dir) if view and view.result_name else None,
        "summary": relative_link(root / view.summary_name, out_dir) if view and view.summary_name else None,
    }


def _invalid_row(placed: Placed, links: dict[str, str | None]) -> dict[str, Any]:
    item = placed.item
    claimed = (item.audit.predicate if item.audit else None) or {}
    return {
        "input": item.given, "verdict": "INVALID", "reasons": [f.to_dict() for f in item.reasons], "notes": [],
        "identity_verified": False, "semantic_id": claimed.get("semantic_id"), "run_id": claimed.get("run_id"),
        "run_label": claimed.get("run_label"), "kind": None, "status": None, "started_utc": None,
        "workload_ids": [], "model_version": None, "backend": None,
        "manifest": str(item.manifest) if item.manifest else None, "run_dir": claimed.get("run_dir"),
        "links": links, "signer_keyid": None, "headline": [], "conclusion": None, "like_for_like": None,
        "not_like_for_like": [], "overridden_settings": [], "figures": [],
    }


def _valid_row(placed: Placed, links: dict[str, str | None], comp: Comparability) -> dict[str, Any]:
    item, view = placed.item, placed.view
    assert view is not None and item.audit is not None
    run = view.run
    return {
        "input": item.given,
        "verdict": "VALID",
        "reasons": [],
        "notes": list(view.notes),
        "identity_verified": True,
        "semantic_id": view.semantic_id,
        "run_id": view.run_id,
        "run_label": run.run_label,
        "kind": view.kind,
        "status": run.status,
        "started_utc": run.started_utc,
        "workload_ids": list(run.workload_ids),
        "model_version": run.model_version,
        "backend": view.backend,
        "manifest": str(item.manifest),
        "run_dir": view.run_dir,
        "links": links,
        "signer_keyid": item.audit.signer_keyid,
        "signer_trusted": item.audit.trusted,
        "headline": [dict(h) for h in view.headline],
        "conclusion": view.conclusion,
        "like_for_like": comp.like_for_like,
        "not_like_for_like": list(comp.reasons),
        "overridden_settings": overridden_settings(view),
        "figures": [{"name": f.name, "sha256": f.sha256} for f in view.figures],
    }


def _bench_key(placed: Placed) -> str | None:
    if placed.view:
        return placed.view.semantic_id
    claimed = (placed.item.audit.predicate if placed.item.audit else None) or {}
    return claimed.get("semantic_id") if isinstance(claimed.get("semantic_id"), str) else UNPLACED


def _diffs(views: list[RunView], comps: dict[str, Comparability]) -> list[dict[str, Any]]:
    """Consecutive runs of the same kind of result, in time order: what changed from one to the next."""
    out = []
    by_kind: dict[str | None, list[RunView]] = defaultdict(list)
    for view in views:
        by_kind[view.kind].append(view)
    for group in by_kind.values():
        for a, b in zip(group, group[1:], strict=False):
            changes = result_diff(a, b)
            out.append(
                {
                    "a": a.run_id,
                    "b": b.run_id,
                    "like_for_like": comps[a.run_id].like_for_like and comps[b.run_id].like_for_like,
                    "figures": changes["figures"],
                    "conclusion": changes["conclusion"],
                    "environment": environment_diff(a, b),
                }
            )
    return out


def bench_sections(placed: list[Placed], root: Path, out_dir: Path) -> list[dict[str, Any]]:
    """One section per bench (semantic id), VALID runs in time order, INVALID inputs after them."""
    groups: dict[str | None, list[Placed]] = defaultdict(list)
    for p in placed:
        groups[_bench_key(p)].append(p)
    sections = []
    for key in sorted(groups, key=lambda k: (k is UNPLACED, k or "")):
        members = groups[key]
        valid = sorted((p for p in members if p.view), key=lambda p: (p.view.run.started_utc, p.view.run_id))
        views = [p.view for p in valid]
        comps = comparability(views)
        rows = [_valid_row(p, _links(p, root, out_dir), comps[p.view.run_id]) for p in valid]
        rows += [_invalid_row(p, _links(p, root, out_dir)) for p in members if not p.view]
        reference = next(iter(comps.values())).reference_run_id if comps else None
        sections.append(
            {
                "semantic_id": key,
                "reference_run_id": reference,
                "runs": rows,
                "diffs": _diffs(views, comps),
                "figures": [],
            }
        )
    return sections


def report_document(
    sections: list[dict[str, Any]],
    *,
    created_utc: str,
    root: str,
    trusted_keys: list[str],
    notes: list[str],
    trust_policy: str | None = None,
) -> dict[str, Any]:
    rows = [r for s in sections for r in s["runs"]]
    valid = sum(r["verdict"] == "VALID" for r in rows)
    doc = {
        "schema": REPORT_SCHEMA,
        "created_utc": created_utc,
        "generator": {"name": "infkit", "version": __version__},
        "root": root,
        "trusted_keys": trusted_keys,
        "trust_policy": trust_policy,
        "counts": {"inputs": len(rows), "valid": valid, "invalid": len(rows) - valid},
        "benches": sections,
    }
    if notes:
        doc["notes"] = notes
    return doc
