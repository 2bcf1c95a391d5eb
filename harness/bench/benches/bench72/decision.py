"""The deployment decision: which candidate to deploy, at what capacity, by how much, and what limits it.

Rule (stated in the result): candidates rank by capacity (the highest rate at which every
SLO held in every run), then by lower peak memory at capacity. The leader is adopted only
when (1) its capacity interval lies wholly above the runner-up's — the lowest rate where
the runner-up failed in every run is at or below the leader's capacity — and (2) the
paired duel, the two interleaved at the leader's capacity over the repeats, shows the
leader's latency on the runner-up's binding SLO lower with a confidence interval that
excludes no effect (``stats.decide``; >= 3 pairs, else the decision is capped). Otherwise
the decision is inconclusive and the cheaper of the two (lower peak memory at capacity)
is named. The binding constraint is the limit that broke at the lowest probed rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.bench.analysis import ClaimResult, blocked_reading, claim_effect, effect_text
from harness.bench.benches.bench72.candidates import (
    Candidate,
    effective_settings,
    kv_bytes_per_token_of,
    pool_check,
)
from harness.bench.benches.bench72.capacity import (
    CLIENT,
    ERRORS,
    SLO,
    TPOT,
    TTFT,
    Campaign,
    Searched,
    duel_label,
)
from harness.bench.metrics import TPOT_P99, TTFT_P99, Metric
from harness.bench.records import Reading
from harness.bench.spec import Claim, History

RULE = ("adopt the leader only when its capacity interval lies above the runner-up's (the runner-up failed every run "
        "at a rate <= the leader's capacity) and the paired duel at the leader's capacity shows the leader's P99 on "
        "the runner-up's binding SLO lower (CI excludes 1, >= 3 interleaved pairs); otherwise inconclusive, naming "
        "the cheaper of the two (lower peak memory at capacity)")
HINTS = {
    TTFT: "prefill and queueing give way first: try a larger max_num_batched_tokens or more max_num_seqs",
    TPOT: "decode gives way first: try fewer max_num_seqs (smaller decode batches) or a faster dtype",
    ERRORS: "requests fail before latency gives way: read the failing probe's requests.jsonl and server log",
    CLIENT: "the client could not keep its schedule before the server gave way: run the client on its own cores",
}


def duel_metric(runner_up: Searched | None) -> Metric:
    """The duel compares the runner-up's binding SLO (TTFT unless TPOT gave way first)."""
    return TPOT_P99 if runner_up is not None and runner_up.binding[:1] == (TPOT,) else TTFT_P99


def separated(leader: Searched, runner_up: Searched) -> bool:
    upper = runner_up.capacity.upper_rps
    return leader.capacity.capacity_rps is not None and upper is not None and upper <= leader.capacity.capacity_rps


@dataclass(frozen=True)
class Decision:
    decision: str
    evidence_level: str
    summary: str
    next_step: str
    record: dict[str, Any]


def interval(s: Searched) -> list[float | None]:
    return [s.capacity.capacity_rps, s.capacity.upper_rps]


def decide(ranked: Sequence[Searched], duel: ClaimResult | None, duel_rate: float | None, *, repeats: int,
           costs: Mapping[str, float | None]) -> Decision:
    """The decision record from the ranked searches and the duel's paired effect (module docstring)."""
    if not ranked or ranked[0].capacity.capacity_rps is None:
        why = "no candidate met every SLO at any probed rate"
        return Decision("inconclusive", "single", why, "relax the SLOs (SLO_TTFT_P99_MS=..., SLO_TPOT_P99_MS=...) or "
                        "lower --min-rps, then rerun", {"deploy": None, "rule": RULE, "reason": why})
    lead = ranked[0]
    hint = HINTS.get(lead.binding[0] if lead.binding else "", "no SLO broke below the search's ceiling: raise --max-rps")
    record: dict[str, Any] = {
        "rule": RULE, "deploy": lead.name, "capacity_rps": lead.capacity.capacity_rps, "interval_rps": interval(lead),
        "binding_constraint": list(lead.binding), "binding_rate_rps": lead.binding_rate_rps,
        "confirmed": lead.capacity.confirmed}
    evidence = "repeated" if lead.capacity.confirmed and repeats >= 3 else "single"
    if len(ranked) < 2:
        summary = f"{lead.name} is the only candidate searched: capacity {lead.capacity.text()}"
        return Decision("inconclusive", evidence, summary, f"add candidates to compare; {hint}", record)
    second = ranked[1]
    cheaper = min((lead, second), key=lambda s: (costs.get(s.name) is None, costs.get(s.name) or 0.0)).name
    apart = separated(lead, second)
    margin = (lead.capacity.capacity_rps - second.capacity.capacity_rps) if second.capacity.capacity_rps else None
    record.update(runner_up=second.name, runner_up_capacity_rps=second.capacity.capacity_rps,
                  runner_up_interval_rps=interval(second), runner_up_binding=list(second.binding),
                  margin_rps=margin, margin_ratio=(lead.capacity.capacity_rps / second.capacity.capacity_rps
                                                   if second.capacity.capacity_rps else None),
                  intervals_separate=apart, cheaper=cheaper, peak_memory_gib=dict(costs))
    gap = (f"{lead.name} {lead.capacity.text()} vs {second.name} {second.capacity.text()}")
    if duel is None:
        record["duel"] = None
        summary = f"{gap}; the paired duel did not run, so the decision is capped"
        return Decision("inconclusive", evidence, summary, f"rerun for the paired duel; {cheaper} is the cheaper",
                        record)
    record["duel"] = {"rate_rps": duel_rate, **duel.to_dict()}
    shown = effect_text(duel.effect, duel.claim.metric.title)
    if apart and duel.decision == "adopt":
        summary = f"deploy {lead.name}: {gap}; intervals separate; duel at {duel_rate:g} req/s: {shown}"
        step = f"deploy {lead.name} at up to {lead.capacity.capacity_rps:g} req/s; {hint}"
        return Decision("adopt", duel.evidence_level, summary, step, record)
    why = ("the capacity intervals overlap" if not apart else f"the paired duel does not confirm it ({duel.reason})")
    summary = (f"inconclusive: {gap}; {why}; duel at {duel_rate:g} req/s: {shown}; the cheaper of the two is {cheaper}")
    step = (f"{cheaper} is the cheaper of the two: deploy it unless the margin matters; to separate them raise "
            "--repeats and --requests (narrower intervals) or lower --rel-tol")
    evidence = duel.evidence_level if duel.evidence_level == "paired" else evidence
    return Decision("inconclusive", evidence, summary, step, record)


def capacity_rows(searched: Sequence[Searched], settings: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    def fmt(v: float | None, spec: str = ".2f") -> str:
        return "-" if v is None else format(v, spec)
    return [[s.name, ", ".join(f"{k}={v}" for k, v in settings.get(s.name, {}).items() if k != "extra_args" or v),
             s.capacity.text(), s.capacity.status, (", ".join(s.binding) or "-") +
             (f" @ {s.binding_rate_rps:g}/s" if s.binding_rate_rps else ""), s.capacity.probes,
             fmt(s.peak("peak_memory_gib")), fmt(s.peak("kv_cache_usage_peak"), ".1%"),
             fmt(s.peak("running_peak"), ".0f")] for s in searched]


CAPACITY_HEADERS = ["candidate", "settings", "capacity [interval]", "search", "binding SLO", "probes",
                    "peak mem GiB", "KV peak", "running peak"]


def capacity_png(searched: Sequence[Searched], slo: SLO, path: Path, *, title: str) -> Path:
    """Capacity per candidate with its interval; P99 TTFT and TPOT against rate for the top two."""
    from harness.report.plots import log_y_axis, pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 4.4), dpi=110)
    ax = axes[0]
    for y, s in enumerate(searched):
        lo, hi = s.capacity.capacity_rps, s.capacity.upper_rps
        if lo is None:
            ax.plot([hi or 0], [y], "x", color="grey")
            continue
        ax.plot([lo, hi if hi is not None else lo * 1.5], [y, y], "-" if hi is not None else "--", color="C0", lw=3,
                alpha=0.5)
        ax.plot([lo], [y], "o", color="C0")
    ax.set_yticks(range(len(searched)), [s.name for s in searched])
    ax.invert_yaxis()
    ax.set_xlabel("Poisson rate (req/s): capacity (dot) to first all-fail rate")
    ax.set_title("capacity under the SLOs")
    ax.grid(True, alpha=0.3)
    for ax, key, limit, name in ((axes[1], "ttft_p99_ms", slo.ttft_p99_ms, "P99 TTFT (ms)"),
                                 (axes[2], "tpot_p99_ms", slo.tpot_p99_ms, "P99 TPOT (ms)")):
        for i, s in enumerate(searched[:2]):
            ok = sorted((p.rate_rps, p.detail[key]) for p in s.probes if p.passed and p.detail.get(key) is not None)
            bad = sorted((p.rate_rps, p.detail[key]) for p in s.probes if not p.passed and p.detail.get(key) is not None)
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


def deployment_reading(history: History, campaign: Campaign, *, candidates: Sequence[Candidate],
                       cited: dict[str, Any] | None, mappings: Mapping[str, Any], title: str) -> Reading:
    """bench-72's read rule: capacities, the duel's paired effect and the decision record."""
    cfg = history.cfg
    slo = campaign.slo(history)
    ranked = campaign.ranked(history)
    duel = history.notes.get("duel")
    claim = None
    if duel is not None:
        runner_up = next((s for s in ranked if s.name == duel["runner_up"]), None)
        claim = claim_effect(history.runs, Claim(duel_metric(runner_up), duel_label(duel["runner_up"]),
                                                 duel_label(duel["leader"]), name="duel"),
                             seed=cfg.seed, resamples=cfg.resamples)
    costs = {s.name: s.peak("peak_memory_gib") for s in ranked}
    verdict = decide(ranked, claim, duel["rate_rps"] if duel else None, repeats=cfg.repeats, costs=costs) if slo else \
        Decision("inconclusive", "single", "no SLOs: the light-load probe gave no latency figures to scale",
                 "set SLO_TTFT_P99_MS=... and SLO_TPOT_P99_MS=..., or cite a bench-66 run (BASELINE=...)",
                 {"deploy": None, "rule": RULE})
    settings = {c.name: c.settings for c in candidates}
    per_token = kv_bytes_per_token_of(history.model.path) if mappings else 0
    pools = {s.name: pool_check(mappings.get(s.name), effective_settings(history.server_log(s.name))["kv_cache_tokens"],
                                per_token) for s in ranked} if mappings else {}
    per_candidate = [{"name": s.name, "settings": {k: list(v) if isinstance(v, tuple) else v
                                                    for k, v in settings[s.name].items()},
                      "capacity": s.capacity.to_dict(), "binding": list(s.binding),
                      "binding_rate_rps": s.binding_rate_rps,
                      "start_rps": history.notes.get("start_rps", {}).get(s.name),
                      "at_capacity": {k: s.peak(k) for k in ("peak_memory_gib", "kv_cache_usage_peak", "running_peak")},
                      "effective": effective_settings(history.server_log(s.name)), "kv_pool_check": pools.get(s.name),
                      "probes": [{"rate_rps": p.rate_rps, "passed": p.passed, "violated": list(p.violated), **p.detail}
                                 for p in s.probes]} for s in ranked]
    details = {"slo": slo.to_dict() if slo else None, "baseline_citation": cited, "decision_record": verdict.record,
               "candidates": per_candidate, "kv_pool_mapping": dict(mappings) or None,
               "search": {k: getattr(cfg, k) for k in ("growth", "rel_tol", "max_probes", "min_rps", "max_rps")},
               "duel": duel, "not_searched": sorted(set(settings) - {s.name for s in ranked})}
    table = tabulate(capacity_rows(ranked, settings), headers=CAPACITY_HEADERS, tablefmt="github")
    lines = ["", f"SLOs: {slo.text()}; {slo.basis}" if slo else "SLOs: not set (no light-load figures)", "",
             table, "", f"decision rule: {RULE}", f"decision: {verdict.summary}",
             *(f"kv pool mismatch: {n} runs {p['engine_gib']} GiB of KV, sized for {p['estimated_gib']} GiB "
               f"(beyond ±{p['tolerance']:.0%}): its capacity is not like-for-like" for n, p in pools.items()
               if p and not p["matches"])]
    headline = [{"name": f"capacity {s.name}", "metric": "request_rate_rps", "value": s.capacity.capacity_rps,
                 "unit": "req/s", "interval": interval(s)} for s in ranked]
    figures = {"capacity.png": lambda path: capacity_png(ranked, slo, path, title=title)} if slo and ranked else {}
    blocked = blocked_reading(history, None, cfg.repeats)
    if blocked is not None:
        blocked = replace(blocked, details=details, lines=tuple(lines), figures=figures, kind="sweep",
                          headline=tuple(headline))
        return blocked
    return Reading(evidence_level=verdict.evidence_level, decision=verdict.decision, summary=verdict.summary,
                   effect=claim.effect if claim else None, repeats=cfg.repeats, details=details, lines=lines,
                   figures=figures, headline=headline, kind="sweep", next_step=verdict.next_step)
