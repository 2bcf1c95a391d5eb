"""Named metrics a bench refers to: a claim, a control or a table column is a name, not code.

A metric is either *per request* — ``samples(records)`` gives one value per completed
request and ``statistic`` reduces them (median, P99); an arm's figure pools every
repeat's requests, and a paired effect resamples repeats and then requests — or *per
run* — ``of_run(run)`` reads one figure of an arm run (throughput, hit rate) and a
paired effect resamples repeats only. Throughput figures are over the run's steady-state window when it has one
(ramp and drain left out), else over the whole run; ``throughput_basis`` says which, with the drain fraction.
Definitions of the per-request values are the
measurement's (``harness.serving.metrics.per_request``, docs/measurement.md), except that a claim's TTFT and E2E
count from the moment the schedule let the request go (``from_ready``: MLPerf LoadGen's scheduled send).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from harness.bench.stats import DEFAULT_MARGIN
from harness.client.records import RequestRecord
from harness.contract.distribution import PERCENTILE_METHOD
from harness.serving.metrics import chunk_token_counts, per_request, token_gaps

if TYPE_CHECKING:
    from harness.bench.records import ArmRun

Statistic = Callable[[np.ndarray], float]


def percentile(q: float) -> Statistic:
    def stat(values: np.ndarray, axis: int | None = None) -> Any:
        out = np.percentile(values, q, method=PERCENTILE_METHOD, axis=axis)
        return float(out) if axis is None else out
    stat.__name__ = f"p{q:g}"
    return stat


@dataclass(frozen=True)
class Metric:
    """One named figure of an arm run, which way is better, and how to print it."""

    name: str  # e.g. "ttft_ms.p50": the key in results and effects
    title: str  # table header
    better: Literal["lower", "higher"]
    fmt: str = ".0f"
    samples: Callable[[Sequence[RequestRecord]], list[float]] | None = None
    statistic: Statistic | None = None
    of_run: Callable[[ArmRun], float | None] | None = None
    unit: str = "ms"
    margin: float = DEFAULT_MARGIN  # smallest relative change worth acting on (a claim or --margin overrides it)
    indexed: Callable[[Sequence[RequestRecord]], dict[int, tuple[float, ...]]] | None = None
    throughput_key: str | None = None  # a throughput figure: over the steady-state window where a run has one

    def pair_values(self, a: ArmRun, b: ArmRun) -> tuple[float | None, float | None]:
        """Two runs' figures over one window: a throughput over the steady state only when both runs have one,
        else both over the whole run (a pair never mixes windows)."""
        if self.throughput_key is not None:
            if None in (_perf("throughput", "steady_state", self.throughput_key)(r) for r in (a, b)):
                whole = _perf("throughput", self.throughput_key)
                return whole(a), whole(b)
        return self.run_value(a), self.run_value(b)

    @property
    def per_request(self) -> bool:
        return self.samples is not None

    def by_request(self, records: Sequence[RequestRecord]) -> dict[int, tuple[float, ...]]:
        """Values by request index, for resampling requests jointly across arms (same index, same prompt)."""
        if self.indexed is not None:
            return self.indexed(records)
        if self.samples is None:
            raise ValueError(f"{self.name} is a per-run metric: it has no requests")
        out: dict[int, tuple[float, ...]] = {}
        for rec in records:
            values = self.samples([rec])
            if values:
                out[rec.index] = tuple(values)
        return out

    def run_value(self, run: ArmRun) -> float | None:
        """The figure of one arm run (a per-run metric's ``of_run``)."""
        if self.of_run is None:
            raise ValueError(f"{self.name} is a per-request metric: it has no per-run figure")
        return self.of_run(run)

    def value(self, runs: Sequence[ArmRun]) -> float | None:
        """The arm's figure over ``runs`` (its repeats): pooled requests, or the median of per-run figures."""
        if self.samples is not None and self.statistic is not None:
            pooled = [v for run in runs for v in self.samples(run.records)]
            return self.statistic(np.asarray(pooled, dtype=float)) if pooled else None
        per_run = [v for v in (self.of_run(run) for run in runs) if v is not None] if self.of_run else []
        return float(np.median(per_run)) if per_run else None

    def format(self, value: float | None) -> str:
        return "-" if value is None else format(value, self.fmt)


def from_ready(rec: RequestRecord) -> dict[str, float | None]:
    """``per_request`` with TTFT and E2E counted from the moment the schedule let the request go (its scheduled
    send, or the slot or batch release it waited for): the client's own send lag counts against the latency, as in
    MLPerf LoadGen, so a late client can never flatter an arm. TPOT and ITL do not move."""
    values = per_request(rec)
    lag_ms = (rec.send_lag_s or 0.0) * 1e3
    return {**values, **{k: v + lag_ms for k in ("ttft_ms", "e2e_ms") if (v := values[k]) is not None}}


def _per_request(key: str) -> Callable[[Sequence[RequestRecord]], list[float]]:
    def samples(records: Sequence[RequestRecord]) -> list[float]:
        out = []
        for rec in records:
            if rec.completed and rec.sent_s is not None and rec.end_s is not None:
                value = from_ready(rec)[key]
                if value is not None:
                    out.append(value)
        return out
    return samples


def _itl_token(records: Sequence[RequestRecord]) -> list[float]:
    """Per-token gaps of the requests whose chunks carry token counts (``harness.serving.metrics.token_gaps``)."""
    out: list[float] = []
    for r in records:
        counts, _ = chunk_token_counts(r) if r.completed else (None, None)
        if counts is not None:
            out += token_gaps(r.chunk_s, counts)
    return out


def _itl(records: Sequence[RequestRecord]) -> list[float]:
    return [g for r in records if r.completed for g in (np.diff(r.chunk_s) * 1e3).tolist()]


def _client_wait(records: Sequence[RequestRecord]) -> list[float]:
    return [max(0.0, (r.sent_s - r.scheduled_s) * 1e3) for r in records
            if r.sent_s is not None and r.scheduled_s is not None]


def _e2e_from_scheduled(records: Sequence[RequestRecord]) -> list[float]:
    """End − scheduled: the latency a user sees, the client's own wait (a closed loop's batch barrier) included."""
    return [(r.end_s - r.scheduled_s) * 1e3 for r in records
            if r.completed and r.end_s is not None and r.scheduled_s is not None]


def _perf(*path: str) -> Callable[[ArmRun], float | None]:
    def read(run: ArmRun) -> float | None:
        node: Any = getattr(run.result.performance, path[0])
        for key in path[1:]:
            node = node.get(key) if isinstance(node, dict) else None
        return float(node) if isinstance(node, (int, float)) else None
    return read


def _steady_or_whole(key: str) -> Callable[[ArmRun], float | None]:
    """A throughput figure over the run's steady-state window when it has one, else over the whole run
    (``throughput_basis`` says which a run's figure is)."""
    def read(run: ArmRun) -> float | None:
        steady = _perf("throughput", "steady_state", key)(run)
        return steady if steady is not None else _perf("throughput", key)(run)
    return read


def throughput_basis(run: ArmRun, key: str = "output_tokens_per_s") -> dict[str, Any]:
    """Which window a run's throughput figure ``key`` covers (``steady_state`` or ``whole_run``, with the reason),
    and its drain fraction: what every throughput headline carries beside it."""
    tp = run.result.performance.throughput or {}
    steady = tp.get("steady_state") or {}
    whole = steady.get(key) is None
    return {"window": "whole_run" if whole else "steady_state", "drain_fraction": steady.get("drain_fraction"),
            "ramp_fraction": steady.get("ramp_fraction"),
            "reason": (steady.get("null_reason") or "no steady-state window recorded") if whole else None}


def basis_summary(runs: Sequence[ArmRun], key: str = "output_tokens_per_s") -> dict[str, Any]:
    """``throughput_basis`` over an arm's runs: windows used (counts), drain fraction median and range."""
    bases = [throughput_basis(r, key) for r in runs]
    drains = [b["drain_fraction"] for b in bases if b["drain_fraction"] is not None]
    windows: dict[str, int] = {}
    for b in bases:
        windows[b["window"]] = windows.get(b["window"], 0) + 1
    reasons = sorted({b["reason"] for b in bases if b["reason"]})
    return {"throughput_window": windows, "drain_fraction": float(np.median(drains)) if drains else None,
            "drain_fraction_range": [min(drains), max(drains)] if drains else None,
            **({"whole_run_reason": reasons} if reasons else {})}


def server_metric(*path: str) -> Callable[[ArmRun], float | None]:
    """A figure of ``details.server_metrics`` (counter deltas and gauge peaks the measurement recorded)."""
    def read(run: ArmRun) -> float | None:
        node: Any = run.result.detail("server_metrics", *path)
        return float(node) if isinstance(node, (int, float)) else None
    return read


def _latency(name: str, title: str, q: float, samples: Callable[[Sequence[RequestRecord]], list[float]],
             fmt: str = ".0f") -> Metric:
    return Metric(f"{name}.p{q:g}", f"{title} p{q:g} ms", "lower", fmt, samples,
                  np.median if q == 50 else percentile(q))


def where(metric: Metric, suffix: str, keep: Callable[[RequestRecord], bool]) -> Metric:
    """``metric`` over the records ``keep`` selects (a request class), named ``<name>[suffix]``."""
    if metric.samples is None:
        raise ValueError(f"{metric.name} is a per-run metric: it has no requests to select")
    inner = metric.samples
    return dataclasses.replace(
        metric,
        name=f"{metric.name}[{suffix}]",
        title=f"{metric.title} {suffix}",
        samples=lambda records: inner([r for r in records if keep(r)]),
    )


def priority_class(metric: Metric, name: str, priority: int) -> Metric:
    """``metric`` over the requests sent with ``priority`` (the client records it in each record's ``extra``)."""
    return where(metric, name, lambda r: r.extra.get("priority") == priority)


def _ttft_from_scheduled(records: Sequence[RequestRecord]) -> list[float]:
    """First token − scheduled send (MLPerf LoadGen's latency): the client's own lateness counts against it."""
    return [
        (r.first_token_s - r.scheduled_s) * 1e3
        for r in records
        if r.completed and r.first_token_s is not None and r.scheduled_s is not None
    ]


TTFT, TPOT, E2E = _per_request("ttft_ms"), _per_request("tpot_ms"), _per_request("e2e_ms")
TTFT_P50 = _latency("ttft_ms", "TTFT", 50, TTFT)
TTFT_P95 = _latency("ttft_ms", "TTFT", 95, TTFT)
TTFT_P99 = _latency("ttft_ms", "TTFT", 99, TTFT)
TPOT_P50 = _latency("tpot_ms", "TPOT", 50, TPOT, ".1f")
TPOT_P99 = _latency("tpot_ms", "TPOT", 99, TPOT, ".1f")
ITL_P50 = _latency("itl_ms", "ITL", 50, _itl, ".1f")
ITL_TOKEN_P50 = _latency("itl_token_ms", "ITL/token", 50, _itl_token, ".1f")
E2E_P50 = _latency("e2e_ms", "E2E", 50, E2E)
E2E_P99 = _latency("e2e_ms", "E2E", 99, E2E)
QUEUE_WAIT_P50 = _latency("queue_wait_client_ms", "client queue", 50, _client_wait, ".1f")
QUEUE_WAIT_P99 = _latency("queue_wait_client_ms", "client queue", 99, _client_wait, ".1f")
TTFT_SCHEDULED_P50 = _latency("ttft_from_scheduled_ms", "TTFT+wait", 50, _ttft_from_scheduled)
TTFT_SCHEDULED_P99 = _latency("ttft_from_scheduled_ms", "TTFT+wait", 99, _ttft_from_scheduled)
E2E_SCHEDULED_P50 = _latency("e2e_from_scheduled_ms", "E2E+wait", 50, _e2e_from_scheduled)
E2E_SCHEDULED_P99 = _latency("e2e_from_scheduled_ms", "E2E+wait", 99, _e2e_from_scheduled)
OUTPUT_TOKENS_PER_S = Metric(
    "output_tokens_per_s", "out tok/s", "higher", ".1f", of_run=_steady_or_whole("output_tokens_per_s"),
    unit="tok/s", throughput_key="output_tokens_per_s"
)
REQUEST_RATE = Metric(
    "request_rate_rps", "req/s", "higher", ".2f", of_run=_steady_or_whole("request_rate_rps"), unit="req/s",
    throughput_key="request_rate_rps"
)
GOODPUT = Metric(
    "goodput_rps", "goodput req/s", "higher", ".2f", of_run=_perf("throughput", "goodput_rps"), unit="req/s"
)
PEAK_MEMORY_GIB = Metric(
    "peak_memory_gib",
    "peak mem GiB",
    "lower",
    ".2f",
    of_run=lambda run: (lambda b: b / 2**30 if b is not None else None)(_perf("peak_memory_bytes")(run)),
    unit="GiB",
)
# Energy and cost over the run's sampled window (performance.energy: NVML on a GPU, RAPL on a CPU host that has it).
ENERGY_PER_TOKEN_J = Metric(
    "energy_per_output_token_j", "J/out tok", "lower", ".3g", of_run=_perf("energy", "energy_per_output_token_j"),
    unit="J"
)
AVG_POWER_W = Metric("avg_power_w", "avg W", "lower", ".0f", of_run=_perf("energy", "avg_power_w"), unit="W")
COST_PER_MTOK_USD = Metric(
    "cost_per_million_output_tokens_usd", "$/M out tok", "lower", ".3g",
    of_run=_perf("energy", "cost_per_million_output_tokens_usd"), unit="USD"
)
DEVICE_MEMORY_GIB = Metric(
    "device_memory_gib", "GPU mem GiB", "lower", ".2f",
    of_run=lambda run: (lambda b: b / 2**30 if b is not None else None)(
        _perf("device_memory", "peak_minus_idle_bytes")(run)),
    unit="GiB",
)
ENERGY_COLUMNS = (ENERGY_PER_TOKEN_J, AVG_POWER_W, COST_PER_MTOK_USD)  # shown beside capacity and throughput
PREFIX_HIT_RATE = Metric(
    "prefix_cache_hit_rate",
    "prefix hit rate",
    "higher",
    ".0%",
    of_run=server_metric("prefix_cache", "hit_rate"),
    unit="fraction",
)
# Speculative decoding, from the run's vllm:spec_decode_* counter deltas (absent when speculation is off).
ACCEPTANCE_RATE = Metric(
    "spec_decode_acceptance_rate",
    "acceptance",
    "higher",
    ".0%",
    of_run=server_metric("spec_decode", "acceptance_rate"),
    unit="fraction",
)
MEAN_ACCEPTANCE_LENGTH = Metric(
    "spec_decode_mean_acceptance_length",
    "mean accept len",
    "higher",
    ".2f",
    of_run=server_metric("spec_decode", "mean_acceptance_length"),
    unit="tokens",
)

SERVER_QUEUE_MEAN = Metric(
    "queue_wait_server_ms.mean",
    "server queue mean ms",
    "lower",
    ".1f",
    of_run=server_metric("queue_time_ms", "mean_ms"),
)
PREEMPTIONS = Metric("preemptions", "preempt", "lower", ".0f", of_run=server_metric("preemptions"), unit="count")
RUNNING_MEAN = Metric(
    "running.mean", "running mean", "higher", ".2f", of_run=server_metric("occupancy", "running_mean"), unit="requests"
)
WAITING_MEAN = Metric(
    "waiting.mean", "waiting mean", "lower", ".2f", of_run=server_metric("occupancy", "waiting_mean"), unit="requests"
)
RUNNING_PEAK = Metric(
    "running.peak", "running peak", "higher", ".0f", of_run=server_metric("running_peak"), unit="requests"
)
WAITING_PEAK = Metric(
    "waiting.peak", "waiting peak", "lower", ".0f", of_run=server_metric("waiting_peak"), unit="requests"
)

METRICS = {
    m.name: m
    for m in (
        TTFT_P50,
        TTFT_P95,
        TTFT_P99,
        TPOT_P50,
        TPOT_P99,
        ITL_P50,
        ITL_TOKEN_P50,
        E2E_P50,
        E2E_P99,
        QUEUE_WAIT_P50,
        QUEUE_WAIT_P99,
        TTFT_SCHEDULED_P50,
        TTFT_SCHEDULED_P99,
        E2E_SCHEDULED_P50,
        E2E_SCHEDULED_P99,
        OUTPUT_TOKENS_PER_S,
        REQUEST_RATE,
        GOODPUT,
        PEAK_MEMORY_GIB,
        DEVICE_MEMORY_GIB,
        ENERGY_PER_TOKEN_J,
        AVG_POWER_W,
        COST_PER_MTOK_USD,
        PREFIX_HIT_RATE,
        SERVER_QUEUE_MEAN,
        PREEMPTIONS,
        RUNNING_MEAN,
        WAITING_MEAN,
        RUNNING_PEAK,
        WAITING_PEAK,
        ACCEPTANCE_RATE,
        MEAN_ACCEPTANCE_LENGTH,
    )
}
