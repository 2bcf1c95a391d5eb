"""Across runs of one bench: which rows are like-for-like, and what changed between two runs.

Rows compare like-for-like only when they replayed the same workloads (run.json
workload_ids) on the same model and backend and produced the same kind of result; the
reference of a bench is the earliest run of its largest such class. The environment diff of
two runs lists every difference of their fingerprints and run records, next to the
difference of their headline figures.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.report.reader import RunView
from harness.rundir.record import RunRecord


@dataclass(frozen=True)
class Comparability:
    like_for_like: bool
    reference_run_id: str
    reasons: tuple[str, ...]  # why not like-for-like with the reference


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text.removeprefix("sha256:")[:12] if text.startswith("sha256:") else text


def _key(view: RunView) -> dict[str, Any]:
    return {
        "workload": tuple(sorted(view.run.workload_ids)),
        "model hash": view.run.model_version,
        "backend version": view.backend,
        "kind of result": view.kind,
    }


def _describe(name: str, ours: Any, theirs: Any) -> str:
    def text(value: Any) -> str:
        if name == "workload":
            return ", ".join(map(_short, value)) or "none"
        return "none" if value is None else _short(value)

    return f"different {name}: {text(ours)} here, {text(theirs)} in the reference"


def comparability(views: list[RunView]) -> dict[str, Comparability]:
    """Per run id: like-for-like with the bench's reference run, or the reasons it is not."""
    if not views:
        return {}
    keys = {v.run_id: _key(v) for v in views}
    frozen = {rid: json.dumps(k, sort_keys=True, default=list) for rid, k in keys.items()}
    counts = Counter(frozen.values())
    # Largest class first; the earliest run of it (views are in time order) is the reference.
    reference = max(views, key=lambda v: (counts[frozen[v.run_id]], -views.index(v)))
    ref_key = keys[reference.run_id]
    out = {}
    for view in views:
        reasons = tuple(_describe(name, value, ref_key[name])
                        for name, value in keys[view.run_id].items() if value != ref_key[name])
        out[view.run_id] = Comparability(not reasons, reference.run_id, reasons)
    return out


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects to dotted keys; lists and scalars stay values."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _render(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _image_entries(run: RunRecord) -> dict[str, Any]:
    out = {}
    for image in run.images:
        if image.get("native"):
            out[image["role"]] = (
                f"native python {image.get('python', '?')}, packages {_short(image['packages_sha256'])}"
            )
        else:
            base = f" (base {image['base_substituted']})" if image.get("base_substituted") else ""
            out[image["role"]] = f"{image['ref']}@{image['digest']}{base}"
    return out


def _gpu(fp: dict[str, Any]) -> str:
    gpus = fp.get("gpus") or []
    return (
        ", ".join(g.get("name", "?") for g in gpus) if gpus else f"none ({fp.get('gpus_absent_reason') or 'no reason'})"
    )


def environment_facets(view: RunView) -> dict[str, dict[str, Any]]:
    """Group → {key: value} of everything that describes where and how a run ran."""
    fp = view.fingerprint or {}
    torch = fp.get("torch") or {}
    nvml = fp.get("nvml") or {}
    run = view.run
    return {
        "harness": dict(fp.get("harness") or {}),
        "packages": dict(fp.get("packages") or {}),
        "images": _image_entries(run),
        "gpu": {
            "GPUs": _gpu(fp),
            "driver": nvml.get("driver_version"),
            "CUDA driver": nvml.get("cuda_driver_version"),
            "torch": torch.get("version"),
            "torch CUDA": torch.get("cuda"),
            "cuDNN": torch.get("cudnn"),
        },
        "cpu": dict(fp.get("host") or {}),
        "python": dict(fp.get("python") or {}),
        "model": {
            "model": run.model_version,
            "tokenizer": (run.tokenizer or {}).get("version"),
            "workload ids": run.workload_ids,
            "backend": view.backend,
        },
        "requested": flatten(run.requested),
        "effective": flatten(run.effective),
        "env": dict(fp.get("env") or {}),
    }


def environment_diff(a: RunView, b: RunView) -> list[dict[str, Any]]:
    """Every fingerprint/run-record difference from ``a`` to ``b``: [{group, key, a, b}]."""
    fa, fb = environment_facets(a), environment_facets(b)
    out = []
    for group in fa:
        left, right = fa[group], fb[group]
        for key in sorted(set(left) | set(right)):
            va, vb = left.get(key), right.get(key)
            if va != vb:
                out.append({"group": group, "key": key, "a": _render(va), "b": _render(vb)})
    return out


def overridden_settings(view: RunView) -> list[dict[str, Any]]:
    """Settings whose effective value differs from the requested one (defaults resolved, clamps, fallbacks)."""
    requested = flatten(view.run.requested)
    effective = flatten(view.run.effective)
    return [
        {"key": k, "requested": _render(requested[k]), "effective": _render(effective[k])}
        for k in requested
        if k in effective and requested[k] != effective[k]
    ]


def _headline_key(item: dict[str, Any]) -> tuple[str, str | None]:
    return item["name"], item.get("arm")


def result_diff(a: RunView, b: RunView) -> dict[str, list[dict[str, Any]]]:
    """Headline figures of both runs matched by name and arm, with the change from a to b,
    and the conclusion fields that changed."""
    left = {_headline_key(i): i for i in a.headline}
    right = {_headline_key(i): i for i in b.headline}
    out = []
    for key in [*left, *(k for k in right if k not in left)]:
        ia, ib = left.get(key), right.get(key)
        va, vb = (ia or {}).get("value"), (ib or {}).get("value")
        row = {
            "name": key[0],
            "arm": key[1],
            "unit": (ia or ib)["unit"],
            "a": va,
            "b": vb,
            "delta": None,
            "ratio": None,
        }
        if va is not None and vb is not None:
            row["delta"] = vb - va
            row["ratio"] = vb / va if va else None
        out.append(row)
    changed = [
        {"field": f, "a": _render(ca), "b": _render(cb)}
        for f in ("decision", "evidence_level", "valid")
        if (ca := (a.conclusion or {}).get(f)) != (cb := (b.conclusion or {}).get(f))
    ]
    return {"figures": out, "conclusion": changed}
