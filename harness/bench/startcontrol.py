"""The A/A start control: how far two starts of one configuration move apart on this host, and citing it.

bench-00 (INF-AA-START) starts the bench's base configuration twice and measures start 2 against
start 1 on the metrics benches decide on; per metric it records the ratio, its interval and the bound
``b = max(|log ci_low|, |log ci_high|)`` (``start_rows``). A bench whose claims cross server starts
cites the newest such run (``--aa-control latest``, the default; ``none``; or a manifest path) once,
before it starts anything, and only when it ran on this host (``host_key``: CPU model, cores, GPUs,
backend, model version). Then a cross-start interval of a bounded metric is widened by that metric's
``b`` on the log scale, ``[lo - b, hi + b]``, and its evidence stays ``repeated``: one A/A pair is one
draw of the start effect, so its bound is a coin flip where start variance dominates; only alternating
restarts put the start effect inside the per-repeat variance and make a cross-start contrast ``paired``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import InvalidInput

if TYPE_CHECKING:
    from harness.bench.claims import ClaimResult
    from harness.models import PreparedModel

SEMANTIC_ID = "INF-AA-START"
DETAILS_KEY = "start_control"  # the A/A result's own rows under details
CITED_KEY = "aa_control"  # a citing run's record of what it cited (result details, run.json effective)
HOST_FIELDS = ("cpu_model", "cpu_cores_logical", "gpus", "backend", "model")


def log_bound(ci_low: float, ci_high: float) -> float:
    """The start-to-start bound of one A/A interval: its farther end from no effect, on the log scale."""
    return max(abs(math.log(ci_low)), abs(math.log(ci_high)))


def start_rows(results: Sequence[ClaimResult | None], limit: float, min_repeats: int) -> list[dict[str, Any]]:
    """One row per A/A metric: start-2/start-1 ratio, interval, bound, and whether it certifies (b <= log(1+limit)
    from >= ``min_repeats`` repeats)."""
    rows = []
    for res in results:
        if res is None:
            continue
        eff = res.effect
        b = log_bound(eff.ci_low, eff.ci_high)
        n = eff.n_pairs
        why = "; ".join([*([f"only {n} valid pair(s) of repeats (< {min_repeats})"] if n < min_repeats else []),
                         *([f"bound ±{math.expm1(b):.1%} exceeds the limit ±{limit:.1%}"]
                           if b > math.log1p(limit) else [])])
        rows.append({"metric": eff.metric, "title": res.claim.metric.title, "ratio": eff.value,
                     "ci_low": eff.ci_low, "ci_high": eff.ci_high, "confidence": eff.confidence,
                     "bound_log": b, "bound_pct": 100 * math.expm1(b), "bounded": not why, "why_not": why or None,
                     "n_repeats": n, "n_requests": eff.n_requests, "method": eff.method,
                     "per_repeat_ratio": list(res.per_repeat)})
    return rows


@dataclass(frozen=True)
class StartControl:
    """A cited A/A run: its id, its citation record, and the bound (log scale) of each metric it certifies."""

    run_id: str
    citation: Mapping[str, Any]
    bounds: Mapping[str, float]
    unbounded: Mapping[str, str] = field(default_factory=dict)

    def bound(self, metric: str) -> float | None:
        return self.bounds.get(metric)

    def to_dict(self) -> dict[str, Any]:
        return {"citation": dict(self.citation), "bounds_log": dict(self.bounds),
                "bounds_pct": {k: 100 * math.expm1(b) for k, b in self.bounds.items()},
                "not_bounded": dict(self.unbounded)}


def host_key(fingerprint: Mapping[str, Any], backend: str | None, model: Mapping[str, Any] | None) -> dict[str, Any]:
    """What must match for an A/A measured elsewhere to speak for this run: CPU model, cores, GPUs, backend, model."""
    host = fingerprint.get("host") or {}
    return {"cpu_model": host.get("cpu_model"), "cpu_cores_logical": host.get("cpu_cores_logical"),
            "gpus": sorted(str(g.get("name")) for g in fingerprint.get("gpus") or []), "backend": backend,
            "model": (model or {}).get("version")}


def current_host(backend: str, model: PreparedModel) -> dict[str, Any]:
    """This host's key, as the fingerprint the run is about to write will record it."""
    from harness.rundir.fingerprint import gpu_info, host_info

    return host_key({"host": host_info(), "gpus": gpu_info()[1]}, backend, model.model_ref)


def from_citation(citation: Any, where: str, root: Path) -> StartControl:
    """The bounds a cited A/A run certifies; a run that holds none (blocked, older) is an input error."""
    rows = citation.detail(DETAILS_KEY, "rows")
    if not rows:
        raise InvalidInput(f"{where}: that {SEMANTIC_ID} run holds no start-to-start bounds "
                           f"(decision {citation.run.decision})", hint="rerun make bench-00")
    return control_of(rows, citation.run.run_id, citation.to_dict(root))


def control_of(rows: Sequence[Mapping[str, Any]], run_id: str, citation: Mapping[str, Any]) -> StartControl:
    """A/A rows (``start_rows``) as the bounds they certify: bounded metrics only; the others with the reason."""
    return StartControl(run_id=run_id, citation=citation,
                        bounds={r["metric"]: r["bound_log"] for r in rows if r["bounded"]},
                        unbounded={r["metric"]: r["why_not"] for r in rows if not r["bounded"]})


def cite_start_control(choice: str, root: Path, here: Mapping[str, Any]) -> tuple[StartControl | None, str]:
    """The A/A control to cite (``latest``, ``none`` or a manifest path) and a line saying what was done.

    ``latest`` that ran on another host (or holds no bounds) is not cited, with the reason; a path
    that does not fit is an input error."""
    from harness.bench.lib.citations import cite_choice
    from harness.contract.jsonio import read_json
    from harness.rundir.fingerprint import FINGERPRINT_FILE

    if choice == "none":
        return None, "no A/A start control cited (--aa-control none): cross-start contrasts stay repeated"
    where = f"--aa-control {choice}"
    citation = cite_choice(choice, root, SEMANTIC_ID)
    if citation is None:
        return None, "no A/A start control has run here (make bench-00): cross-start contrasts stay repeated"
    run = citation.run
    there = host_key(read_json(citation.file(FINGERPRINT_FILE)), run.effective.get("backend"), run.model)
    differ = [f"{k} {there.get(k)!r} here {here.get(k)!r}" for k in HOST_FIELDS if there.get(k) != here.get(k)]
    try:
        if differ:
            raise InvalidInput(f"{where}: A/A start control {run.run_id} ran on another host: {'; '.join(differ)}")
        control = from_citation(citation, where, root)
    except InvalidInput as exc:
        if choice != "latest":
            raise
        return None, f"{exc.message.removeprefix(where + ': ')}: not cited; cross-start contrasts stay repeated"
    shown = (", ".join(f"{k} ±{math.expm1(b):.1%}" for k, b in control.bounds.items())
             or "it bounds no metric, so cross-start contrasts stay repeated")
    return control, f"cited A/A start control {control.run_id} ({citation.to_dict(root)['manifest']}): {shown}"


def start_control_for(semantic_id: str, choice: str, root: Path, backend: str, model: PreparedModel
                      ) -> tuple[StartControl | None, dict[str, Any] | None, str]:
    """What a bench run cites, once before it starts: (control, the record for run.json and the result, a line).
    The A/A bench itself cites none."""
    if semantic_id == SEMANTIC_ID:
        return None, None, ""
    control, note = cite_start_control(choice, root, current_host(backend, model))
    return control, {"requested": choice, "cited": control.to_dict() if control else None, "note": note}, note
