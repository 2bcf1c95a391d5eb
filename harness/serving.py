"""The serving measurement: replay a workload against an OpenAI-compatible endpoint.

``measure(cfg)`` writes into ``cfg.out_dir``:

- ``requests.jsonl`` — one record per request, appended as each ends (a crash loses
  nothing that finished); requests never sent get a ``not_sent`` record at the end;
- ``metrics_before.prom`` / ``metrics_after.prom`` — the server's raw ``/metrics`` text;
- ``result.json`` — the schema-valid result (server metrics in ``details.server_metrics``,
  validity in ``conclusion``);
- ``summary.txt`` — the same, as a short table for people.

Ctrl-C ends the run: finished records stay, in-flight ones are ``cancelled``, the result
is written with an ``aborted`` failure, then ``KeyboardInterrupt`` propagates.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client import (
    ClientConfig,
    RecordWriter,
    RequestRecord,
    auto_workers,
    plan_shares,
    read_records,
    run_client,
)
from harness.client.pool import ClientRun
from harness.contract import Failure, atomic_write_text, write_result
from harness.errors import InvalidInput
from harness.ids import new_run_id
from harness.metrics import SLO_KEYS
from harness.serving_result import ResultInputs, build_serving_result
from harness.summary import render_summary
from harness.telemetry import POLLED_GAUGES, GaugePoller, PeakSampler, scrape, summarize
from harness.telemetry.prometheus import Scrape, parse
from harness.validity import ValidityLimits, load_references
from harness.workload import Workload, load_workload

REQUESTS_FILE = "requests.jsonl"
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.txt"
METRICS_BEFORE = "metrics_before.prom"
METRICS_AFTER = "metrics_after.prom"
HEALTH_PATHS = ("/health", "/v1/models")


@dataclass(frozen=True)
class MeasureConfig:
    """Everything one measurement needs; defaults live here and nowhere else."""

    endpoint: str  # base URL of the OpenAI-compatible server
    model: str  # served model name
    workload_path: str | Path
    out_dir: str | Path
    endpoints: tuple[str, ...] = ()  # several replicas: requests are dealt round-robin over these base URLs
    semantic_id: str = "INF-FLOAT-BASELINE"
    run_label: str = "serving"
    run_id: str | None = None  # None: a new sortable id
    api: str = "completions"  # "completions" | "chat"
    max_concurrency: int | None = None  # closed loop: overrides the workload's; timed: cap on in-flight
    timeout_s: float = 600.0  # per request
    profile_id: str = "INF-VLLM-CPU"
    backend_name: str = "vllm-cpu"
    backend_version: str = "unknown"
    backend_command: tuple[str, ...] | None = None
    runtime: str = "local"
    image: dict[str, Any] | None = None
    model_ref: dict[str, str] | None = None  # {"name", "version"}
    tokenizer_ref: dict[str, str] | None = None  # None: the workload's tokenizer
    metrics_url: str | None = None  # None: <endpoint>/metrics
    memory_probe: Callable[[], int | None] | None = None  # sampled during the run for peak memory
    memory_source: str = "rss_process_tree"
    ignore_eos: bool = False
    min_tokens: bool = False
    slo: Mapping[str, float] = field(default_factory=dict)  # ttft_ms, tpot_ms, e2e_ms, itl_ms
    token_budget: Mapping[str, int | None] | None = None  # max_num_batched_tokens, max_num_seqs, block_size
    client_workers: int | None = None  # None: one process per 1024 concurrent streams, up to the CPU count
    validity: ValidityLimits = field(default_factory=ValidityLimits)
    reference_path: str | Path | None = None  # reference outputs for greedy agreement
    server_alive: Callable[[], bool] | None = None  # checked after the run: a dead server is a server_crash
    failure_refiner: Callable[[Failure], Failure] | None = None  # e.g. add the server's log tail
    extra_details: Mapping[str, Any] = field(default_factory=dict)
    keep_text: bool = True


@dataclass(frozen=True)
class MeasureOutcome:
    result_path: Path
    requests_path: Path
    metrics_before_path: Path | None
    metrics_after_path: Path | None
    result: dict[str, Any]
    records: tuple[RequestRecord, ...]

    @property
    def valid(self) -> bool:
        return bool(self.result["conclusion"]["valid"])


def _check(cfg: MeasureConfig, workload: Workload) -> tuple[int | None, int | None]:
    """(closed-loop concurrency, timed max concurrency) after validating the config."""
    if cfg.api not in ("completions", "chat"):
        raise InvalidInput(f"--api {cfg.api!r}: choose completions or chat")
    if not cfg.endpoint.startswith(("http://", "https://")):
        raise InvalidInput(f"--endpoint {cfg.endpoint!r}: need a base URL such as http://127.0.0.1:8000")
    if cfg.timeout_s <= 0:
        raise InvalidInput("--timeout must be > 0 seconds")
    if cfg.max_concurrency is not None and cfg.max_concurrency < 1:
        raise InvalidInput("--max-concurrency must be >= 1")
    unknown_slo = sorted(set(cfg.slo) - set(SLO_KEYS))
    if unknown_slo:
        raise InvalidInput(f"unknown SLO keys {unknown_slo}", hint=f"use {', '.join(SLO_KEYS)}")
    if cfg.api == "completions" and any(r.prompt is None for r in workload.requests):
        raise InvalidInput(f"workload {workload.kind!r} holds chat messages; run it with --api chat")
    if workload.arrival["process"] == "closed":
        return cfg.max_concurrency or workload.arrival["concurrency"], None
    return None, cfg.max_concurrency


def endpoint_answers(endpoint: str, timeout_s: float = 3.0) -> bool:
    """True when the server answers HTTP at all (any status) on a health path."""
    for path in HEALTH_PATHS:
        try:
            with urllib.request.urlopen(endpoint.rstrip("/") + path, timeout=timeout_s):  # noqa: S310
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


def scrape_all(urls: list[str]) -> Scrape:
    """One scrape, or several replicas' texts concatenated: the parse sums every series over them."""
    if len(urls) == 1:
        return scrape(urls[0])
    got = [scrape(u) for u in urls]
    errors = [g.error for g in got if g.error]
    if errors:
        return Scrape(None, None, "; ".join(errors))
    text = "".join(f"# infkit: replica {u}\n{g.text}" for u, g in zip(urls, got, strict=True))
    return Scrape(text, parse(text, time.monotonic()))


def _save_scrape(out_dir: Path, name: str, got) -> Path | None:
    return atomic_write_text(out_dir / name, got.text) if got.text is not None else None


def _fill_not_sent(requests_path: Path, workload: Workload) -> list[RequestRecord]:
    records = {r.index: r for r in read_records(requests_path)}
    missing = [r for r in workload.requests if r.index not in records]
    if missing:
        with RecordWriter(requests_path) as writer:
            for req in missing:
                rec = RequestRecord(index=req.index, status="not_sent", input_tokens=req.input_tokens,
                                    output_tokens_requested=req.output_tokens, error="the run ended before it was sent")
                writer.write(rec)
                records[req.index] = rec
    return [records[i] for i in sorted(records)]


def _failure(cfg: MeasureConfig, run: ClientRun, records: list[RequestRecord]) -> Failure | None:
    if run.interrupted:
        done = sum(r.completed for r in records)
        return Failure(stage="run", kind="aborted", message=f"interrupted: {done} of {len(records)} requests completed")
    broken = [r for r in records if r.status in ("error", "disconnected", "timeout", "not_sent")]
    exited = cfg.server_alive is not None and not cfg.server_alive()
    if exited or (broken and not endpoint_answers(cfg.endpoint)):
        first = next((r.error for r in broken if r.error), "no answer")
        message = ("the server process exited during the run" if exited else
                   "the endpoint answered before the run and stopped during it")
        failure = Failure(stage="run", kind="server_crash",
                          message=f"{message}; {len(broken)} requests ended early (first: {first})")
        return cfg.failure_refiner(failure) if cfg.failure_refiner else failure
    return None


def measure(cfg: MeasureConfig) -> MeasureOutcome:
    """Replay the workload, write the run's files and return them with the result document."""
    workload = load_workload(cfg.workload_path)
    closed, cap = _check(cfg, workload)
    references = load_references(cfg.reference_path) if cfg.reference_path else None
    out_dir = Path(cfg.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--out {out_dir}: cannot create the run directory: {exc.strerror or exc}") from None
    if not endpoint_answers(cfg.endpoint):
        raise InvalidInput(f"{cfg.endpoint} does not answer on {' or '.join(HEALTH_PATHS)}",
                           hint="start the server or check --endpoint")
    requests_path = out_dir / REQUESTS_FILE
    RecordWriter(requests_path, truncate=True).close()
    metrics_urls = [u.rstrip("/") + "/metrics" for u in cfg.endpoints] or [cfg.metrics_url or
                                                                          cfg.endpoint.rstrip("/") + "/metrics"]
    metrics_url = metrics_urls[0]
    client = ClientConfig(endpoint=cfg.endpoint, model=cfg.model, api=cfg.api, timeout_s=cfg.timeout_s,
                          ignore_eos=cfg.ignore_eos, min_tokens=cfg.min_tokens, keep_text=cfg.keep_text)
    workers = cfg.client_workers or auto_workers(closed or cap or len(workload.requests))
    shares = plan_shares(workload.requests, client, str(requests_path), workers=workers,
                         closed_concurrency=closed, max_concurrency=cap, endpoints=cfg.endpoints)

    before = scrape_all(metrics_urls)
    before_path = _save_scrape(out_dir, METRICS_BEFORE, before)
    poller = GaugePoller(metrics_url, POLLED_GAUGES).start() if before.snapshot else None
    sampler = PeakSampler(cfg.memory_probe).start() if cfg.memory_probe else None
    try:
        run = run_client(shares)
    finally:
        if poller:
            poller.stop()
        peak_bytes = sampler.stop() if sampler else None
    after = scrape_all(metrics_urls)
    after_path = _save_scrape(out_dir, METRICS_AFTER, after)
    records = _fill_not_sent(requests_path, workload)

    server = summarize(before.snapshot, after.snapshot, poller.peaks if poller else None)
    server["url"] = metrics_url
    if len(metrics_urls) > 1:  # counters summed over the replicas; polled gauge peaks are the first replica's
        server["urls"] = metrics_urls
    if before.error or after.error:
        server["scrape_errors"] = [e for e in (before.error, after.error) if e]
    inputs = ResultInputs(
        workload=workload, records=records, run=run, server_metrics=server, closed_concurrency=closed,
        max_concurrency=cap, peak_memory_bytes=peak_bytes, failure=_failure(cfg, run, records),
        references=references, run_id=cfg.run_id or new_run_id(),
        requested={k: v for k, v in dataclasses.asdict(dataclasses.replace(cfg, memory_probe=None, failure_refiner=None, server_alive=None)).items()
                   if k not in ("extra_details",)},
    )
    doc = build_serving_result(cfg, inputs)
    result_path = write_result(out_dir / RESULT_FILE, doc)
    atomic_write_text(out_dir / SUMMARY_FILE, render_summary(doc))
    outcome = MeasureOutcome(result_path=result_path, requests_path=requests_path, metrics_before_path=before_path,
                             metrics_after_path=after_path, result=doc, records=tuple(records))
    if run.interrupted:
        raise KeyboardInterrupt
    return outcome
