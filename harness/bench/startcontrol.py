"""The host's start-to-start variance: how far starts of one configuration move apart (bench-00), and pooling it.

bench-00 (INF-AA-START) starts the bench's base configuration ``--starts`` times and serves one short list
``--repeats`` times on each start; per metric it records the between-start variance of the log figure by one-way
random effects over the per-start repeats (``start_variance``): ``σ²_start = (MS_between − MS_within) / n₀`` with
``starts − 1`` df, the unbiased estimate kept as it is (it may be negative by chance) beside its clip at 0.

A bench whose claims cross server starts pools, once before it starts anything (``--aa-control latest``, the
default; ``none``; or one manifest path), every bench-00 run made on this host key (``host_key``: CPU model, logical
cores, GPUs, backend, model version, dtype and the engine knobs every server starts with) within ``EXPIRY_DAYS``:
``σ²_start`` is the df-weighted mean of the runs' unbiased estimates, with their summed df, clipped at 0
(``StartVariance``). A cross-start claim's interval then carries ``2·σ²_start`` beside its own ``s²/n``
(``stats.with_start_variance``) and its evidence is ``start-pooled``. A run on another host key, an expired one, or
one without an estimate is not pooled, and the citing run says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench.stats import PairedEffect, t_quantile
from harness.errors import InvalidInput

if TYPE_CHECKING:
    from harness.bench.claims import ClaimResult
    from harness.bench.lib.citations import Citation
    from harness.bench.metrics import Metric
    from harness.bench.records import ArmRun
    from harness.models import PreparedModel

SEMANTIC_ID = "INF-AA-START"
DETAILS_KEY = "start_control"  # the A/A result's own rows under details
CITED_KEY = "aa_control"  # a citing run's record of what it pooled (result details, run.json effective)
EXPIRY_DAYS = 14  # a bench-00 run older than this speaks no more for the host (software, load and tuning drift)
ENGINE_KNOBS = ("kv_cache_space_gib", "max_model_len", "enforce_eager")  # every server of a bench starts with them
HOST_FIELDS = ("cpu_model", "cpu_cores_logical", "gpus", "backend", "model", "dtype", "engine")


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite df of a sum of independent variance estimates ``(v_i, df_i)``: (Σv)² / Σ(v²/df);
    a part with no variance adds nothing."""
    parts = [(v, df) for v, df in parts if v > 0]
    if not parts:
        raise ValueError("no variance to combine")
    return sum(v for v, _ in parts) ** 2 / sum(v * v / df for v, df in parts)


def with_start_variance(eff: PairedEffect, var_start: float, df_start: float) -> PairedEffect:
    """A cross-start effect's interval with the start-to-start variance in it: each arm ran on its own start, so the
    mean log ratio carries ``u_B - u_A`` with variance ``2·var_start`` beside the repeats' own ``s²/n``; the df is
    Welch–Satterthwaite's over the two parts (``n - 1`` and ``df_start``), the quantile Student t's."""
    if eff.log_se is None:
        raise ValueError("a start variance joins a repeat-level interval (two or more repeats)")
    within, between = eff.log_se ** 2, 2.0 * max(0.0, var_start)
    se = math.sqrt(within + between)
    df = satterthwaite([(within, eff.n_pairs - 1), (between, df_start)]) if within + between > 0 else eff.n_pairs - 1
    half = t_quantile(1 - (1 - eff.confidence) / 2, df) * se
    return dataclasses.replace(eff, ci_low=math.exp(eff.log_mean - half), ci_high=math.exp(eff.log_mean + half),
                               log_se=se, start_var_log=max(0.0, var_start), t_df=df)


@dataclass(frozen=True)
class Estimate:
    """One run's start variance of a metric: the unbiased estimate (may be negative), its df (starts − 1) and
    the estimate's own variance."""

    var: float
    df: float
    var_var: float


def start_variance(logs_by_start: Sequence[Sequence[float]]) -> dict[str, Any] | None:
    """One-way random effects on the log figure, starts as groups: the between-start variance, its df
    (``starts − 1``) and the mean squares it came from; None with fewer than two starts."""
    groups = [list(g) for g in logs_by_start if g]
    k, n = len(groups), sum(len(g) for g in groups)
    if k < 2:
        return None
    grand = sum(sum(g) for g in groups) / n
    means = [sum(g) / len(g) for g in groups]
    ss_between = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True))
    ss_within = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g)
    ms_between = ss_between / (k - 1)
    ms_within = ss_within / (n - k) if n > k else 0.0  # one repeat a start: the run noise stays in (conservative)
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)  # repeats per start, unbalanced form
    raw = (ms_between - ms_within) / n0
    # the estimate's own variance as Satterthwaite reads it: 2/n0² · (MS_b²/df_b + MS_w²/df_w)
    var_var = 2 / n0 ** 2 * (ms_between ** 2 / (k - 1) + (ms_within ** 2 / (n - k) if n > k else 0.0))
    return {"starts": k, "start_repeats": n, "start_var_log_raw": raw, "start_var_log": max(0.0, raw),
            "start_df": k - 1, "start_var_var": var_var, "start_sd_pct": 100 * math.expm1(math.sqrt(max(0.0, raw))),
            "ms_between": ms_between, "ms_within": ms_within, "n0": n0}


def pair_variance(per_repeat_ratio: Sequence[float]) -> Estimate | None:
    """An older two-start bench-00 row as one start pair: ``(d̄² − s²_d/n) / 2`` with 1 df (``d``: the per-repeat log
    ratios of start 2 over start 1; ``E d̄² = 2σ²_start + σ²_d/n``); its variance ``2 (d̄²/2)² / 1`` (one χ²₁ draw)."""
    d = [math.log(r) for r in per_repeat_ratio if r and r > 0]
    if len(d) < 2:
        return None
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return Estimate((mean * mean - var / len(d)) / 2, 1.0, mean ** 4 / 2)


def run_figure(metric: Metric, run: ArmRun) -> float | None:
    """One arm run's figure of ``metric``: its statistic over the run's requests, or the run's own figure."""
    if metric.per_request:
        import numpy as np

        values = [v for vs in metric.by_request(run.records).values() for v in vs]
        return float(metric.statistic(np.asarray(values, dtype=float))) if values and metric.statistic else None
    return metric.run_value(run)


def start_rows(results: Sequence[ClaimResult | None], runs: Sequence[ArmRun], starts: Sequence[str]
               ) -> list[dict[str, Any]]:
    """One row per metric: start-2/start-1 ratio and interval (the first pair, ``results``), and the between-start
    variance of its log figure over every start's valid repeats."""
    rows = []
    for res in results:
        if res is None:
            continue
        eff, metric = res.effect, res.claim.metric
        logs = [[math.log(v) for r in runs if r.label == s and not r.failure and r.records and r.valid
                 and (v := run_figure(metric, r)) and v > 0] for s in starts]
        rows.append({"metric": eff.metric, "title": metric.title, "ratio": eff.value, "ci_low": eff.ci_low,
                     "ci_high": eff.ci_high, "confidence": eff.confidence, "n_repeats": eff.n_pairs,
                     "n_requests": eff.n_requests, "method": eff.method, "per_repeat_ratio": list(res.per_repeat),
                     **(start_variance(logs) or {"starts": sum(bool(g) for g in logs), "start_df": 0})})
    return rows


def estimates_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, Estimate]:
    """Per metric the start variance a bench-00 run's rows hold; a two-start run from before the start variance was
    recorded counts as one start pair (``pair_variance``)."""
    out = {}
    for row in rows:
        if row.get("start_df"):
            out[row["metric"]] = Estimate(float(row["start_var_log_raw"]), float(row["start_df"]),
                                          float(row["start_var_var"]))
        elif "start_df" not in row and (pair := pair_variance(row.get("per_repeat_ratio") or [])):
            out[row["metric"]] = pair
    return out


@dataclass(frozen=True)
class StartVariance:
    """The pooled start-to-start variance a bench cites: each pooled run's estimates, and why others were not."""

    runs: tuple[tuple[str, Mapping[str, Any], Mapping[str, Estimate]], ...]  # (run id, citation, estimates)
    not_pooled: tuple[str, ...] = field(default_factory=tuple)

    def pooled(self, metric: str) -> Estimate | None:
        """``metric``'s runs pooled: the df-weighted mean of their unbiased estimates, the summed df, and the
        pooled estimate's variance ``Σ w² Var_i`` (``w = df_i / Σdf``)."""
        parts = [est[metric] for _, _, est in self.runs if metric in est]
        df = sum(e.df for e in parts)
        if not df:
            return None
        return Estimate(sum(e.var * e.df for e in parts) / df, df, sum((e.df / df) ** 2 * e.var_var for e in parts))

    def of(self, metric: str) -> tuple[float, float] | None:
        """``(σ²_start, its effective df)`` of ``metric``: the pooled estimate clipped at 0, and Satterthwaite's df
        ``2σ̂⁴ / Var(σ̂²)``, between 1 and the summed df (less where within-start noise is much of the between-start mean
        square); (0, summed df) when the estimate is not positive."""
        est = self.pooled(metric)
        if est is None:
            return None
        if est.var <= 0:
            return 0.0, est.df
        return est.var, max(1.0, min(est.df, 2 * est.var ** 2 / est.var_var)) if est.var_var > 0 else est.df

    @property
    def run_ids(self) -> list[str]:
        return [run_id for run_id, _, _ in self.runs]

    def metrics(self) -> list[str]:
        return list(dict.fromkeys(m for _, _, est in self.runs for m in est))

    def to_dict(self) -> dict[str, Any]:
        pooled = {m: self.of(m) for m in self.metrics()}
        summed = {m: e.df for m in self.metrics() if (e := self.pooled(m))}
        return {"citations": [dict(c) for _, c, _ in self.runs], "expiry_days": EXPIRY_DAYS,
                "start_var_log": {m: v[0] for m, v in pooled.items() if v},
                "start_df": summed, "start_df_effective": {m: v[1] for m, v in pooled.items() if v},
                "start_sd_pct": {m: 100 * math.expm1(math.sqrt(v[0])) for m, v in pooled.items() if v},
                "not_pooled": list(self.not_pooled)}


def host_key(fingerprint: Mapping[str, Any], effective: Mapping[str, Any], model: Mapping[str, Any] | None
             ) -> dict[str, Any]:
    """What must match for a start variance measured in another run to speak for this one: CPU model, cores, GPUs,
    backend, model version, dtype and the engine knobs (``ENGINE_KNOBS``) every server starts with."""
    host = fingerprint.get("host") or {}
    return {"cpu_model": host.get("cpu_model"), "cpu_cores_logical": host.get("cpu_cores_logical"),
            "gpus": sorted(str(g.get("name")) for g in fingerprint.get("gpus") or []),
            "backend": effective.get("backend"), "model": (model or {}).get("version"), "dtype": effective.get("dtype"),
            "engine": {k: effective.get(k) for k in ENGINE_KNOBS}}


def current_host(backend: str, model: PreparedModel, cfg: Any) -> dict[str, Any]:
    """This run's key, as the fingerprint and run.json it is about to write will record it."""
    from harness.rundir.fingerprint import gpu_info, host_info

    effective = {"backend": backend, "dtype": cfg.dtype, **{k: getattr(cfg, k) for k in ENGINE_KNOBS}}
    return host_key({"host": host_info(), "gpus": gpu_info()[1]}, effective, model.model_ref)


def run_started(run_id: str) -> datetime | None:
    """When a run started, from its id (``20261207T184617Z-...``)."""
    try:
        return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _estimates(citation: Citation, here: Mapping[str, Any], now: datetime, root: Path) -> dict[str, Any]:
    """A cited bench-00 run's estimates; InvalidInput when it ran on another host key, expired or holds none."""
    from harness.contract.jsonio import read_json
    from harness.rundir.fingerprint import FINGERPRINT_FILE

    run = citation.run
    started = run_started(run.run_id)
    if started is None or now - started > timedelta(days=EXPIRY_DAYS):
        raise InvalidInput(f"bench-00 run {run.run_id} expired (older than {EXPIRY_DAYS} days)",
                           hint="rerun make bench-00")
    there = host_key(read_json(citation.file(FINGERPRINT_FILE)), run.effective, run.model)
    differ = [f"{k} {there.get(k)!r} here {here.get(k)!r}" for k in HOST_FIELDS if there.get(k) != here.get(k)]
    if differ:
        raise InvalidInput(f"bench-00 run {run.run_id} ran on another host key: {'; '.join(differ)}")
    if run.decision == "blocked":  # stopped early (competing load, a failed start): its starts are not this host's
        raise InvalidInput(f"bench-00 run {run.run_id} ended blocked: its start variance is not pooled",
                           hint="rerun make bench-00 on a quiet host")
    rows = citation.detail(DETAILS_KEY, "rows") or []
    found = estimates_of(rows)
    if not found:
        raise InvalidInput(f"bench-00 run {run.run_id} holds no start-to-start variance "
                           f"(decision {run.decision})", hint="rerun make bench-00")
    return found


def pool_start_variance(choice: str, root: Path, here: Mapping[str, Any], now: datetime | None = None
                        ) -> tuple[StartVariance | None, str]:
    """The start variance to cite (``latest``: every bench-00 run on this host key within the expiry, pooled;
    ``none``; or one manifest path) and a line saying what was done. For a path, any misfit is an input error."""
    from harness.bench.lib.citations import cite
    from harness.manifest.sign import MANIFEST_SUFFIX, MANIFESTS_DIR

    now = now or datetime.now(UTC)
    if choice == "none":
        return None, "no start variance cited (--aa-control none): cross-start contrasts stay repeated"
    if choice != "latest":
        citation = cite(choice, root, semantic_id=SEMANTIC_ID)
        try:
            found = _estimates(citation, here, now, root)
        except InvalidInput as exc:
            raise InvalidInput(f"--aa-control {choice}: {exc.message}", hint=exc.hint) from None
        pooled = StartVariance(((citation.run.run_id, citation.to_dict(root), found),))
        return pooled, _pooled_line(pooled)
    manifests = sorted((Path(root) / MANIFESTS_DIR / SEMANTIC_ID).glob(f"*{MANIFEST_SUFFIX}"), reverse=True)
    fresh = [p for p in manifests if (t := run_started(p.name)) and now - t <= timedelta(days=EXPIRY_DAYS)]
    skipped = ([f"{len(manifests) - len(fresh)} older bench-00 run(s) expired (> {EXPIRY_DAYS} days)"]
               if len(fresh) < len(manifests) else [])
    runs = []
    for path in fresh:
        try:
            citation = cite(path, root, semantic_id=SEMANTIC_ID)
            runs.append((citation.run.run_id, citation.to_dict(root), _estimates(citation, here, now, root)))
        except InvalidInput as exc:
            skipped.append(exc.message)
    pooled = StartVariance(tuple(runs), tuple(skipped))
    if not runs:
        why = f" (not pooled: {'; '.join(skipped)})" if skipped else ""
        return None, (f"no bench-00 run on this host key within {EXPIRY_DAYS} days{why}: cross-start contrasts stay "
                      "repeated; make bench-00 measures the start-to-start variance")
    return pooled, _pooled_line(pooled)


def _pooled_line(pooled: StartVariance) -> str:
    shown = ", ".join(f"{m} σ {100 * math.expm1(math.sqrt(v[0])):.1f} % ({v[1]:.1f} df)"
                      for m in pooled.metrics() if (v := pooled.of(m)))
    line = f"pooled start-to-start variance of bench-00 run(s) {', '.join(pooled.run_ids)} on this host: {shown}"
    return line + (f"; not pooled: {'; '.join(pooled.not_pooled)}" if pooled.not_pooled else "")


def start_control_for(semantic_id: str, choice: str, root: Path, backend: str, model: PreparedModel, cfg: Any
                      ) -> tuple[StartVariance | None, dict[str, Any] | None, str]:
    """What a bench run cites, once before it starts: (the pooled variance, the record for run.json and the
    result, a line). bench-00 itself cites none."""
    if semantic_id == SEMANTIC_ID:
        return None, None, ""
    pooled, note = pool_start_variance(choice, root, current_host(backend, model, cfg))
    return pooled, {"requested": choice, "cited": pooled.to_dict() if pooled else None, "note": note}, note


def start_variance_here(cfg: Any, root: Path) -> str | None:
    """Which bench-00 runs a bench at ``cfg`` would pool on this host key right now (the line its run would write),
    or None when it would pool none (no run, or the model not prepared yet: then no run can have served it)."""
    from harness.backends.host_dtype import choose_dtype
    from harness.bench.modelfit import fit_to_model
    from harness.bench.placement import resolve_placement
    from harness.models.resolve import find_resolved
    from harness.rundir.fingerprint import host_isa

    model = find_resolved(cfg.model)
    if model is None:
        return None
    backend = resolve_placement(cfg.gpu, cfg.backend, cfg.runtime).backend
    cfg = fit_to_model(dataclasses.replace(cfg, dtype=choose_dtype(backend, host_isa(), cfg.dtype).dtype), model)
    pooled, note = pool_start_variance("latest", root, current_host(backend, model, cfg))
    return note if pooled else None
