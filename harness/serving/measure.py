"""The serving measurement: replay a workload against an OpenAI-compatible endpoint.

``measure(cfg)`` writes into ``cfg.out_dir``:

- ``requests.jsonl`` — one record per request, appended as each ends (a crash loses
  nothing that finished); requests never sent get a ``not_sent`` record at the end;
- ``metrics_before.prom`` / ``metrics_after.prom`` — the server's raw ``/metrics`` text;
- ``gauges.jsonl`` — the running/waiting/KV-usage gauges polled during the run (seconds from the
  run's start), when the server exports them; written just before the result, which lists it
  (``details.server_metrics.gauges``: rows, polls, failed polls);
- ``result.json`` — the schema-valid result (server metrics in ``details.server_metrics``,
  validity in ``conclusion``);
- ``summary.txt`` — the same, as a short table for people.

Ctrl-C (or SIGTERM/SIGHUP, which the CLI turns into it) ends the run at any point after the run
directory exists: finished records stay, in-flight ones are ``cancelled``, the rest ``not_sent``,
the result is written with an ``aborted`` failure in bounded time (a stalled server gets one short
scrape), then ``KeyboardInterrupt`` propagates. A second Ctrl-C waits for the result.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
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
from harness.client.loop import deferred_interrupt
from harness.client.pool import ClientRun
from harness.contract import Failure, atomic_write_text, write_result
from harness.contract.paths import check_output_dir
from harness.errors import InvalidInput
from harness.ids import new_run_id
from harness.serving.checks import check_config, recorded_settings
from harness.serving.checks import check_workload_limits as check_workload_limits  # re-exported
from harness.serving.config import MeasureConfig as MeasureConfig  # re-exported: where every caller finds it
from harness.serving.cpushare import CpuWindow, cpu_details
from harness.serving.metrics import TokenEnds
from harness.serving.result import ResultInputs, RunFacts, build_serving_result
from harness.serving.samplers import RunSamplers
from harness.serving.summary import render_summary
from harness.serving.validity import load_references
from harness.telemetry import (
    POLLED_GAUGES,
    GaugePoller,
    occupancy_rows,
    scrape,
    summarize,
)
from harness.telemetry.prometheus import SCRAPE_TIMEOUT_S, Scrape, parse
from harness.workload import Workload, load_workload

REQUESTS_FILE = "requests.jsonl"
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.txt"
METRICS_BEFORE = "metrics_before.prom"
METRICS_AFTER = "metrics_after.prom"
GAUGES_FILE = "gauges.jsonl"
HEALTH_PATHS = ("/health", "/v1/models")
INTERRUPTED_SCRAPE_TIMEOUT_S = 1.0  # the scrape after an interrupted run: a stalled server must not hold Ctrl-C up


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


def run_facts(cfg: MeasureConfig) -> RunFacts:
    """What the result states about the run: the few values of the config that result building needs."""
    return RunFacts(
        semantic_id=cfg.semantic_id,
        run_label=cfg.run_label,
        run_id=cfg.run_id or new_run_id(),
        served_model=cfg.model,
        model_ref=cfg.model_ref,
        tokenizer_ref=cfg.tokenizer_ref,
        profile_id=cfg.profile_id,
        backend_name=cfg.backend_name,
        backend_version=cfg.backend_version,
        backend_command=cfg.backend_command,
        runtime=cfg.runtime,
        image=cfg.image,
        api=cfg.api,
        ignore_eos=cfg.ignore_eos,
        min_tokens=cfg.min_tokens,
        slo=dict(cfg.slo),
        validity=cfg.validity,
        token_budget=cfg.token_budget,
        memory_source=cfg.memory_source,
        memory_probed=cfg.memory_probe is not None,
        requested=recorded_settings(cfg),
        extra_details=dict(cfg.extra_details),
        batch_barrier=cfg.batch_barrier,
        stream=cfg.stream,
        token_ends=_token_ends(cfg.tokenizer_path),
    )


def _token_ends(path: str | Path | None) -> TokenEnds | None:
    if path is None:
        return None
    from harness.workload.tokens import ExactTokenizer

    return ExactTokenizer(path).token_ends


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


def metrics_urls_of(cfg: MeasureConfig) -> list[str]:
    """Every replica's /metrics (client-spread endpoints), else the one endpoint's (or the given metrics URL)."""
    return [u.rstrip("/") + "/metrics" for u in cfg.endpoints] or [
        cfg.metrics_url or cfg.endpoint.rstrip("/") + "/metrics"]


def scrape_all(urls: list[str], timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """One scrape, or several replicas' texts concatenated: the parse sums every series over them."""
    if len(urls) == 1:
        return scrape(urls[0], timeout_s=timeout_s)
    got = [scrape(u, timeout_s=timeout_s) for u in urls]
    errors = [g.error for g in got if g.error]
    if errors:
        return Scrape(None, None, "; ".join(errors))
    text = "".join(f"# infkit: replica {u}\n{g.text}" for u, g in zip(urls, got, strict=True))
    return Scrape(text, parse(text, time.monotonic()))


def _save_scrape(out_dir: Path, name: str, got) -> Path | None:
    return atomic_write_text(out_dir / name, got.text) if got.text is not None else None


def gauges_entry(poller: GaugePoller | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``gauges.jsonl`` holds: written (with the result) only when there are rows; polls and failed polls
    say how much of the run it covers (a server that stalls answers no poll after the stall)."""
    if poller is None:
        return {"file": None, "rows": 0, "polls": 0, "failed_polls": 0, "why": "no /metrics snapshot before the run"}
    return {
        "file": GAUGES_FILE if rows else None,
        "rows": len(rows),
        "polls": poller.polls,
        "failed_polls": poller.failures,
        "interval_s": poller.interval_s,
    }


def _fill_not_sent(requests_path: Path, workload: Workload) -> list[RequestRecord]:
    records = {r.index: r for r in read_records(requests_path)}
    missing = [r for r in workload.requests if r.index not in records]
    if missing:
        with RecordWriter(requests_path) as writer:
            for req in missing:
                rec = RequestRecord(
                    index=req.index,
                    status="not_sent",
                    input_tokens=req.input_tokens,
                    output_tokens_requested=req.output_tokens,
                    error="the run ended before it was sent",
                )
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
        message = (
            "the server process exited during the run"
            if exited
            else "the endpoint answered before the run and stopped during it"
        )
        failure = Failure(
            stage="run", kind="server_crash", message=f"{message}; {len(broken)} requests ended early (first: {first})"
        )
        return cfg.failure_refiner(failure) if cfg.failure_refiner else failure
    return None


def _shares(cfg: MeasureConfig, workload: Workload, requests_path: Path, closed: int | None, cap: int | None) -> list:
    """The client's configuration dealt to its worker processes (a session workload whole sessions at a time)."""
    client = ClientConfig(
        endpoint=cfg.endpoint,
        model=cfg.model,
        api=cfg.api,
        timeout_s=cfg.timeout_s,
        ignore_eos=cfg.ignore_eos,
        min_tokens=cfg.min_tokens,
        keep_text=cfg.keep_text,
        stream=cfg.stream,
    )
    workers = cfg.client_workers or auto_workers(closed or cap or len(workload.requests))
    return plan_shares(
        workload.requests,
        client,
        str(requests_path),
        workers=workers,
        closed_concurrency=closed,
        max_concurrency=cap,
        batch_barrier=cfg.batch_barrier,
        endpoints=cfg.endpoints,
        sessions=(workload.header.get("sessions") or {}).get("history"),
    )


def measure(cfg: MeasureConfig) -> MeasureOutcome:
    """Replay the workload, write the run's files and return them with the result document."""
    workload = load_workload(cfg.workload_path)
    closed, cap = check_config(cfg, workload)
    references = load_references(cfg.reference_path) if cfg.reference_path else None
    out_dir = check_output_dir(cfg.out_dir, "--out")
    if not endpoint_answers(cfg.endpoint):
        raise InvalidInput(
            f"{cfg.endpoint} does not answer on {' or '.join(HEALTH_PATHS)}",
            hint="start the server or check --endpoint",
        )
    try:  # only now: a refused run leaves no directory behind
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--out {out_dir}: cannot create the run directory: {exc.strerror or exc}") from None
    requests_path = out_dir / REQUESTS_FILE
    RecordWriter(requests_path, truncate=True).close()
    metrics_urls = metrics_urls_of(cfg)
    metrics_url = metrics_urls[0]
    shares = _shares(cfg, workload, requests_path, closed, cap)

    before, poller, run = Scrape(None, None, "interrupted before the first scrape"), None, None
    samplers = RunSamplers(cfg.memory_probe, cfg.gpu_devices, cfg.gpu_idle, cfg.gpu_interval_s, cfg.rapl_root,
                           cfg.usd_per_gpu_hour)
    cpu = CpuWindow(cfg.cpu_probe)
    try:  # from here on, Ctrl-C (or a stop signal) ends the run and every request still gets a record
        before = scrape_all(metrics_urls)
        poller = GaugePoller(metrics_url, POLLED_GAUGES, cfg.gauge_interval_s).start() if before.snapshot else None
        samplers.start()
        following = (
            cfg.reporter.task(cfg.run_label, len(workload.requests), requests_path)
            if cfg.reporter
            else contextlib.nullcontext()
        )
        with following:
            cpu.open()
            run = run_client(shares)
    except KeyboardInterrupt:
        pass
    finally:
        with deferred_interrupt():
            cpu.close()
            if poller:
                poller.stop()
            samplers.stop()
    with deferred_interrupt() as late:  # writing what was measured takes bounded time: a second Ctrl-C waits for it
        run = run or ClientRun(t0=time.monotonic(), stats=(), interrupted=True, workers=len(shares))
        outcome = _write_outputs(cfg, workload, out_dir, run, before, poller, samplers, references, closed, cap,
                                 cpu_details(cpu, cfg.validity))
    if run.interrupted or late.hit:
        raise KeyboardInterrupt
    return outcome


def _write_outputs(
    cfg: MeasureConfig,
    workload: Workload,
    out_dir: Path,
    run: ClientRun,
    before: Scrape,
    poller: GaugePoller | None,
    samplers: RunSamplers,
    references: Any,
    closed: int | None,
    cap: int | None,
    cpu: dict[str, Any] | None = None,
) -> MeasureOutcome:
    """After the client: the second scrape, a record for every request, the gauges, the result and the summary."""
    metrics_urls = metrics_urls_of(cfg)
    requests_path = out_dir / REQUESTS_FILE
    before_path = _save_scrape(out_dir, METRICS_BEFORE, before)
    # An interrupted run against a stalled server must not wait out the full scrape timeout.
    after = scrape_all(metrics_urls, timeout_s=INTERRUPTED_SCRAPE_TIMEOUT_S if run.interrupted else SCRAPE_TIMEOUT_S)
    after_path = _save_scrape(out_dir, METRICS_AFTER, after)
    records = _fill_not_sent(requests_path, workload)

    ends = [r.end_s for r in records if r.end_s is not None]
    rows = occupancy_rows(poller.series, run.t0, max(ends, default=None)) if poller else []
    server = summarize(before.snapshot, after.snapshot, poller.readings if poller else None, rows)
    server["url"] = metrics_urls[0]
    server["gauges"] = gauges_entry(poller, rows)
    if len(metrics_urls) > 1:  # counters summed over the replicas; polled gauge peaks are the first replica's
        server["urls"] = metrics_urls
    if before.error or after.error:
        server["scrape_errors"] = [e for e in (before.error, after.error) if e]
    inputs = ResultInputs(
        workload=workload,
        records=records,
        run=run,
        server_metrics=server,
        closed_concurrency=closed,
        max_concurrency=cap,
        peak_memory_bytes=samplers.peak_bytes,
        failure=_failure(cfg, run, records),
        references=references,
        cpu=cpu,
        energy=samplers.energy_inputs(before.snapshot),
    )
    doc = build_serving_result(run_facts(cfg), inputs)
    if rows:  # listed in the result (server_metrics.gauges) and written with it, never without it
        atomic_write_text(out_dir / GAUGES_FILE, "".join(json.dumps(r) + "\n" for r in rows))
    result_path = write_result(out_dir / RESULT_FILE, doc)
    atomic_write_text(out_dir / SUMMARY_FILE, render_summary(doc))
    return MeasureOutcome(result_path=result_path, requests_path=requests_path, metrics_before_path=before_path,
                          metrics_after_path=after_path, result=doc, records=tuple(records))
