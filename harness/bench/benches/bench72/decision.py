"""The deployment decision: which candidate to deploy, at what capacity, and what limits it.

Rule (stated in the result): every candidate is probed on one shared schedule of rates; its capacity is fitted
from all its probes (``harness.bench.lib.capacity_fit``: the rate where the isotonic fit of P99 against rate
crosses the SLO, with a 95 % interval: the union of resampled requests' and a lognormal fit's). Candidates
whose intervals overlap the leader's are tied, and the tie is the decision: inconclusive between them, the
cheapest of the tie (lower peak memory) named with its reason. A leader whose interval lies above every other
candidate's is adopted when the paired duel — the top two interleaved just inside the leader's capacity — shows
its latency on the runner-up's binding SLO lower (``stats.decide``; >= 3 pairs, else capped). A candidate that
changes numerics (dtype, quantization) must pass the greedy-agreement gate against the highest-precision
candidate served (``gate``), or it can be neither adopted nor named. The binding constraint
is the limit whose crossing sets the capacity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

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
    confirm_label,
    duel_label,
    verdict,
)
from harness.bench.benches.bench72.certify import bound_text, confirmation, deploy_text, probe_count
from harness.bench.benches.bench72.gate import REFERENCE_RULE, agreement, changes_numerics, numerics_of, reference_of
from harness.bench.benches.bench72.plot import capacity_png
from harness.bench.lib.capacity_fit import Estimate, Ranking, rank
from harness.bench.lib.exceedance import ExceedanceCapacity
from harness.bench.metrics import ENERGY_COLUMNS, TPOT_P99, TTFT_P99, Metric
from harness.bench.records import Reading
from harness.bench.spec import Claim, History

RULE = ("candidates rank by the certified lower bound (below), the capacity fitted from every probe of one shared "
        "schedule the secondary figure (isotonic P99 vs rate crossing the SLO, 95 % interval: the union of resampled "
        "requests' and a lognormal fit's); candidates certifying the same rate whose fitted intervals overlap the "
        "leader's are tied and the tie is the decision (inconclusive, the cheapest of the tie by peak memory named); "
        "a leader standing alone is adopted when the paired duel at its certified rate (else inside its capacity) "
        "shows its P99 on the runner-up's binding SLO lower (CI excludes 1, >= 3 pairs); a candidate whose numerics "
        "differ from the highest-precision candidate's must match its greedy outputs exactly on --min-agreement of "
        "the requests")
DEPLOY_RULE = ("deploy up to the one-sided 95 % lower bound of the rate whose share of requests over an SLO is "
               "within the stated level: each probe's steady window as an exceedance count (a probe whose queue grew, "
               "or whose rate is at or over 95 % of what the candidate's overloaded probes completed, counts as all "
               "exceeding), rates tested low to high by a Clopper-Pearson bound clustered by probe and by the queue's "
               "relaxation time, each at the share its requests can show (>= 1 %; 299 requests without an exceedance "
               "show 1 %)")
HINTS = {
    TTFT: "prefill and queueing give way first: try a larger max_num_batched_tokens or more max_num_seqs",
    TPOT: "decode gives way first: try fewer max_num_seqs (smaller decode batches) or a faster dtype",
    ERRORS: "requests fail before latency gives way: read the failing probe's requests.jsonl and server log",
    CLIENT: "the client could not keep its schedule before the server gave way: run the client on its own cores",
}


def duel_metric(runner_up: Searched | None) -> Metric:
    """The duel compares the runner-up's binding SLO (TTFT unless TPOT gave way first)."""
    return TPOT_P99 if runner_up is not None and runner_up.binding[:1] == (TPOT,) else TTFT_P99


@dataclass(frozen=True)
class Decision:
    decision: str
    evidence_level: str
    summary: str
    next_step: str
    record: dict[str, Any]


def interval(s: Searched) -> list[float | None]:
    e = s.estimate
    return [e.low_rps, e.high_rps] if e else [None, None]


def _capacity(s: Searched) -> float | None:
    return s.estimate.capacity_rps if s.estimate else None


def decide(ranked: Sequence[Searched], duel: ClaimResult | None, duel_rate: float | None, *, repeats: int,
           costs: Mapping[str, float | None], gates: Mapping[str, dict[str, Any]] | None = None,
           certs: Mapping[str, ExceedanceCapacity] | None = None) -> Decision:
    """The decision record from the fitted capacities, the gate and the duel's paired effect (module docstring);
    where to deploy is the chosen candidate's exceedance lower bound (``certify``), never the point estimate."""
    gates = gates or {}
    certs = certs or {s.name: s.certified for s in ranked if s.certified is not None}
    # a capacity below the schedule is only a bound (its lowest rate already broke a limit): it does not qualify
    ok = [s for s in ranked if _capacity(s) is not None and gates.get(s.name, {}).get("passed", True)
          and cast(Estimate, s.estimate).status != "below the schedule"]
    failed = [s.name for s in ranked if not gates.get(s.name, {}).get("passed", True)]
    gate_text = f"; greedy-agreement gate failed: {', '.join(failed)}" if failed else ""
    if not ok:
        why = "no candidate's fitted P99 stays under the SLOs on the schedule" + gate_text
        return Decision("inconclusive", "single", why, "relax the SLOs (SLO_TIER=..., SLO_TTFT_P99_MS=...) or lower "
                        "START_RPS, then rerun", {"deploy": None, "rule": RULE, "reason": why, "gates": dict(gates)})
    ranking = rank_by_bound(ok, certs, costs)
    lead = next(s for s in ok if s.name == ranking.best)
    chosen = next(s for s in ok if s.name == ranking.chosen)
    hint = HINTS.get(lead.binding[0] if lead.binding else "", "no SLO broke on the schedule: raise --schedule-above")
    record: dict[str, Any] = {
        "rule": RULE, "deploy": chosen.name, "capacity_rps": _capacity(chosen), "interval_rps": interval(chosen),
        "binding_constraint": list(chosen.binding), "binding_limit": chosen.estimate.binding if chosen.estimate else
        None, "tied": list(ranking.tied), "reason": ranking.reason + gate_text, "gates": dict(gates),
        "fit_status": chosen.estimate.status if chosen.estimate else None, "peak_memory_gib": dict(costs),
        "deploy_up_to_rps": certs[chosen.name].lower_rps if chosen.name in certs else None,
        "deploy_rule": DEPLOY_RULE, "exceedance": {n: c.to_dict() for n, c in certs.items()}}
    deploy = deploy_text(chosen.name, certs.get(chosen.name))
    text = "; ".join(f"{s.name} {bound_text(certs.get(s.name))}, fitted {s.estimate.text()}" for s in ok if s.estimate)
    if len(ok) < 2:
        only = cast(Estimate, lead.estimate)  # a qualifying candidate has a fitted capacity
        summary = (f"{lead.name} is the only candidate that qualifies: {bound_text(certs.get(lead.name))}, fitted "
                   f"capacity {only.text()}{gate_text}")
        return Decision("inconclusive", "single", summary, f"add candidates to compare; {hint}", record)
    if len(ranking.tied) > 1:
        summary = f"{ranking.reason}: {deploy}; {text}{gate_text}"
        step = (f"deploy {chosen.name}; to separate the tie, lengthen the probes (--requests, --probe-seconds) for "
                "narrower intervals")
        return Decision("inconclusive", "repeated" if repeats >= 3 else "single", summary, step, record)
    record["duel"] = None if duel is None else {"rate_rps": duel_rate, **duel.to_dict()}
    if duel is None:
        summary = f"{lead.name} stands alone ({text}); the paired duel did not run, so the decision is capped"
        return Decision("inconclusive", "single", summary, f"rerun for the paired duel; {hint}", record)
    shown = effect_text(duel.effect, duel.claim.metric.title)
    if duel.decision == "adopt":
        summary = f"deploy {lead.name}: {text}; it stands alone; duel at {duel_rate:.3g} req/s: {shown}{gate_text}"
        step = f"{deploy}; {hint}"
        return Decision("adopt", duel.evidence_level, summary, step, record)
    summary = f"inconclusive: {text}; the paired duel does not confirm {lead.name} ({duel.reason}); {shown}"
    more = ("the duel crosses two server starts, so more repeats keep it repeated" if duel.evidence_level == "repeated"
            else "raise --repeats for the duel")
    return Decision("inconclusive", duel.evidence_level, summary, f"{more}; {hint}", record)


def rank_by_bound(ok: Sequence[Searched], certs: Mapping[str, ExceedanceCapacity],
                  costs: Mapping[str, float | None]) -> Ranking:
    """The best by certified lower bound; among candidates certifying the same rate (or none) by fitted capacity,
    whose overlapping intervals tie (``capacity_fit.rank``: the cheaper of a tie chosen)."""
    lowers = {s.name: c.lower_rps for s in ok if (c := certs.get(s.name)) is not None and c.lower_rps}
    best = max(lowers.values(), default=None)
    top = [s for s in ok if lowers.get(s.name) == best]
    ranking = rank({s.name: s.estimate for s in top if s.estimate is not None}, costs, "peak memory GiB")
    if best is None:
        return replace(ranking, reason=f"no candidate certifies a rate, so by fitted capacity: {ranking.reason}")
    if len(top) == 1:
        return Ranking(top[0].name, (top[0].name,), top[0].name,
                       f"{top[0].name} certifies the highest rate ({best:.3g} req/s)")
    return replace(ranking, reason=f"{', '.join(s.name for s in top)} certify the same rate ({best:.3g} req/s); "
                                   f"{ranking.reason}")


def capacity_rows(searched: Sequence[Searched], settings: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    def fmt(v: float | None, spec: str = ".2f") -> str:
        return "-" if v is None else format(v, spec)
    return [[s.name, ", ".join(f"{k}={v}" for k, v in settings.get(s.name, {}).items() if k != "extra_args" or v),
             s.estimate.text() if s.estimate else "-", s.estimate.status if s.estimate else "-",
             (", ".join(s.binding) or "-") +
             (f" @ {s.binding_rate_rps:g}/s" if s.binding_rate_rps else ""), len(s.probes),
             fmt(s.peak("peak_memory_gib")), fmt(s.peak("device_memory_gib")),
             fmt(s.peak("kv_cache_usage_peak"), ".1%"), fmt(s.peak("running_peak"), ".0f"),
             *(fmt(s.peak(m.name), m.fmt) for m in ENERGY_COLUMNS)]
            for s in searched]


# energy and cost at capacity (the largest over its runs there): J per output token, average W, USD per million
# output tokens at the stated GPU-hour price; "-" where not measured (a CPU host without RAPL, no price given)
CAPACITY_HEADERS = ["candidate", "settings", "capacity [95 % interval]", "fit", "first broken SLO", "probes",
                    "peak mem GiB", "GPU mem GiB", "KV peak", "running peak", *(m.title for m in ENERGY_COLUMNS)]


def _duel_claim(history: History, ranked: Sequence[Searched], duel: Mapping[str, Any] | None) -> ClaimResult | None:
    """The duel's paired effect: the runner-up against the leader, on two kept-up starts."""
    if duel is None:
        return None
    runner_up = next((s for s in ranked if s.name == duel["runner_up"]), None)
    return claim_effect(
        history.runs,
        Claim(duel_metric(runner_up), duel_label(duel["runner_up"]), duel_label(duel["leader"]), name="duel"),
        seed=history.cfg.seed,
        resamples=history.cfg.resamples,
        design="cross-start",
        start=history.start_control,
    )  # two kept-up starts: repeated, or start-pooled with the host's start variance from bench-00


def _no_slo() -> Decision:
    return Decision(
        "inconclusive",
        "single",
        "no SLOs: the light-load probe gave no latency figures to scale",
        "set SLO_TTFT_P99_MS=... and SLO_TPOT_P99_MS=..., or cite a bench-66 run (BASELINE=...)",
        {"deploy": None, "rule": RULE},
    )


def _pools(history: History, ranked: Sequence[Searched], mappings: Mapping[str, Any]) -> dict[str, Any]:
    """Each candidate's KV pool as the engine sized it against the mapping's estimate (none without mappings)."""
    if not mappings:
        return {}
    per_token = kv_bytes_per_token_of(history.model.path)
    return {
        s.name: pool_check(
            mappings.get(s.name), effective_settings(history.server_log(s.name))["kv_cache_tokens"], per_token
        )
        for s in ranked
    }


def _per_candidate(history: History, ranked: Sequence[Searched], settings: Mapping[str, Mapping[str, Any]],
                   gates: Mapping[str, Any], pools: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings[s.name].items()},
            "capacity": s.estimate.to_dict() if s.estimate else None,
            "pass_fail": s.capacity.to_dict(),
            "binding": list(s.binding),
            "gate": gates.get(s.name),
            "binding_rate_rps": s.binding_rate_rps,
            "start_rps": history.notes.get("start_rps", {}).get(s.name),
            "at_capacity": {k: s.peak(k) for k in ("peak_memory_gib", "device_memory_gib", "kv_cache_usage_peak",
                                                   "running_peak", *(m.name for m in ENERGY_COLUMNS))},
            "effective": effective_settings(history.server_log(s.name)),
            "kv_pool_check": pools.get(s.name),
            "send_lag_pooled": s.send_lag,
            "probes": [
                {"rate_rps": p.rate_rps, "passed": p.passed, "violated": list(p.violated), **p.detail} for p in s.probes
            ],
        }
        for s in ranked
    ]


def _lines(slo: SLO | None, table: str, verdict: Decision, pools: Mapping[str, Any]) -> list[str]:
    return [
        "",
        f"SLOs: {slo.text()}; {slo.basis}" if slo else "SLOs: not set (no light-load figures)",
        "",
        table,
        "",
        f"decision rule: {RULE}",
        f"decision: {verdict.summary}",
        *(
            f"kv pool mismatch: {n} runs {p['engine_gib']} GiB of KV, sized for {p['estimated_gib']} GiB "
            f"(beyond ±{p['tolerance']:.0%}): its capacity is not like-for-like"
            for n, p in pools.items()
            if p and not p["matches"]
        ),
    ]


def schedule_record(history: History, campaign: Campaign) -> dict[str, Any]:
    """The probe schedule as run (with the rungs added below and above) and the settings that made it."""
    return {"rates_rps": history.notes.get("schedule"), "centre": campaign.centre(history)[1],
            "extended_below": history.notes.get("extended_below", []),
            "extended_above": history.notes.get("extended_above", []),
            **{k: getattr(campaign.cfg, k) for k in ("growth", "schedule_below", "schedule_extend_below",
                                                     "schedule_above", "schedule_extend_above", "min_rps", "max_rps")}}


def extension_lines(history: History) -> list[str]:
    """The summary's lines on rungs added to the schedule, below its foot and above its top."""
    below, above = history.notes.get("extended_below"), history.notes.get("extended_above")
    return ([f"schedule extended below its foot (the first candidate broke a limit there): "
             f"{', '.join(f'{r:g}' for r in below)} req/s, for every candidate"] if below else []) + (
            [f"schedule extended above its top (a candidate had not broken a limit twice there): "
             f"{', '.join(f'{r:g}' for r in above)} req/s, for every later candidate"] if above else [])


def deployment_reading(
    history: History,
    campaign: Campaign,
    *,
    candidates: Sequence[Candidate],
    cited: dict[str, Any] | None,
    mappings: Mapping[str, Any],
    title: str,
) -> Reading:
    """bench-72's read rule: capacities, the duel's paired effect and the decision record."""
    cfg = history.cfg
    slo = campaign.slo(history)
    ranked = campaign.ranked(history)
    duel = history.notes.get("duel")
    claim = _duel_claim(history, ranked, duel)
    costs = {s.name: s.peak("peak_memory_gib") for s in ranked}
    gates = numerics_gates(history, candidates, cfg.min_agreement)
    certs = {s.name: s.certified for s in ranked if s.certified is not None}
    verdict = (
        decide(ranked, claim, duel["rate_rps"] if duel else None, repeats=cfg.repeats, costs=costs, gates=gates)
        if slo
        else _no_slo()
    )
    confirmed = confirm_reading(history, ranked, slo)
    if confirmed:
        verdict.record["confirm"] = confirmed
    settings = {c.name: c.settings for c in candidates}
    pools = _pools(history, ranked, mappings)
    details = {
        "slo": slo.to_dict() if slo else None,
        "baseline_citation": cited,
        "decision_record": verdict.record,
        "candidates": _per_candidate(history, ranked, settings, gates, pools),
        "kv_pool_mapping": dict(mappings) or None,
        "schedule": schedule_record(history, campaign),
        "slo_tier": campaign.tier,
        "duel": duel,
        "not_searched": sorted(set(settings) - {s.name for s in ranked}),
    }
    table = tabulate(capacity_rows(ranked, settings), headers=CAPACITY_HEADERS, tablefmt="github")
    lines = _lines(slo, table, verdict, pools)
    lines[2:2] = extension_lines(history)
    lines += [f"exceedance {name}: {c.text()}" for name, c in certs.items()]  # where each may be deployed, bounded
    lines += [confirmed["text"]] if confirmed else []
    lines += [f"send lag pooled over {s.name}'s probes: {lag_text(s.send_lag)}" for s in ranked if s.send_lag]
    headline = tuple({"name": f"capacity {s.name}", "metric": "request_rate_rps", "value": _capacity(s),
                      "unit": "req/s", "interval": interval(s)} for s in ranked)
    figures = {"capacity.png": lambda path: capacity_png(ranked, slo, path, title=title)} if slo and ranked else {}
    fallback = (cited or {}).get("fallback")
    if fallback:  # the schedule's centre (and relative SLOs) come from this bench's own probe: said beside the verdict
        lines.insert(0, fallback)
    blocked = blocked_reading(history, None, cfg.repeats)
    if blocked is not None:
        return replace(blocked, details=details, lines=tuple(lines), figures=figures, kind="sweep", headline=headline)
    summary = f"{verdict.summary}; {fallback}" if fallback else verdict.summary
    return Reading(evidence_level=verdict.evidence_level, decision=verdict.decision, summary=summary,
                   effect=claim.effect if claim else None, repeats=cfg.repeats, details=details, lines=tuple(lines),
                   figures=figures, headline=headline, kind="sweep", next_step=verdict.next_step)


def confirm_reading(history: History, ranked: Sequence[Searched], slo: SLO | None) -> dict[str, Any] | None:
    """The confirming run at the deploy point (``--confirm-s``) read against its candidate's probes, or None."""
    note = history.notes.get("confirm")
    if not note:
        return None
    found = next((s for s in ranked if s.name == note["candidate"]), None)
    run = next((r for r in history.of(confirm_label(note["candidate"])) if not r.failure and r.records), None)
    if slo is None or found is None or found.certified is None or run is None:
        return {**note, "held": None, "text": "confirming run: did not complete"}
    labels = history.notes.get("probes", {})
    runs = [r for r in history.runs if labels.get(r.label, {}).get("candidate") == found.name and not r.failure]
    probes = [probe_count(r, slo, p.rate_rps) for r, p in zip(runs, found.probes, strict=True)]
    broken = [v for v in verdict(run, slo, note["rate_rps"]).violated if v in (CLIENT, ERRORS)]
    return {"candidate": found.name, **confirmation(run, slo, found.certified, probes, broken)}


def lag_text(record: Mapping[str, Any]) -> str:
    """One pooled send-lag judgement in words."""
    if not record.get("judged"):
        return record.get("why", "not judged")
    late = record.get("invalid_repeats") and [f"{c['check']} {c['value_ms']:.1f} ms > {c['limit_ms']:.1f} ms"
                                              for c in record["failed"]]
    shown = ", ".join(f"{k} {v:.1f} ms" for k, v in (("P95", record.get("send_lag_p95_ms")),
                                                      ("P99", record.get("send_lag_p99_ms"))) if v is not None)
    return (f"{record['sends']} sends, {shown}: "
            + (f"late ({'; '.join(late)}): the probes holding late sends fail on their client schedule" if late
               else "kept the schedule"))


def numerics_gates(history: History, candidates: Sequence[Candidate], min_exact_share: float) -> dict[str, dict]:
    """The gate at the schedule's lowest rate: the fixed reference's entry and one for every candidate whose
    numerics differ from it (gate.py: the highest precision served is the reference)."""
    schedule = history.notes.get("schedule") or []
    settings = {c.name: c.settings for c in candidates}
    ref = reference_of(settings)
    if ref is None or not schedule:
        return {}
    rate = schedule[0]
    dtype, quant = numerics_of(settings[ref])
    stated = {"reference": ref, "reference_rule": REFERENCE_RULE, "reference_numerics": {"dtype": dtype,
              "quantization": quant}, "rate_rps": rate}

    def records(name: str) -> list:
        return [r for run in history.of(f"{name} rate={rate:g}/s") if not run.failure for r in run.records]

    gates = {c.name: {**stated, **agreement(records(ref), records(c.name), min_exact_share)}
             for c in candidates if changes_numerics(c.settings, settings[ref])}
    if gates:
        gates[ref] = {**stated, "passed": True, "reason": f"the reference ({dtype}"
                      f"{', ' + quant if quant else ''}): {REFERENCE_RULE}"}
    return gates
