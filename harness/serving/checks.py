"""The checks ``harness.serving.measure`` makes before the first request, and the settings a result records.

Everything a result will carry is checked with the rule the result is held to, so that a value that would stop
the result from being written never costs a run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.contract.jsonio import find_problem, is_finite_number
from harness.contract.result import RESULT_SCHEMA
from harness.contract.schemas import value_problem
from harness.errors import InvalidInput
from harness.serving.metrics import SLO_KEYS
from harness.workload import Workload
from harness.workload.generators import MAX_REQUESTS, MAX_TOKENS

if TYPE_CHECKING:
    from harness.serving.measure import MeasureConfig


def check_config(cfg: MeasureConfig, workload: Workload) -> tuple[int | None, int | None]:
    """(closed-loop concurrency, timed max concurrency) after validating the config.

    Everything the result will carry is checked here, before the first request, with the rule the
    result is held to: a value that would stop the result from being written must not cost a run.
    """
    if cfg.api not in ("completions", "chat"):
        raise InvalidInput(f"--api {cfg.api!r}: choose completions or chat")
    for flag, url in (("--endpoint", cfg.endpoint), ("--metrics-url", cfg.metrics_url or cfg.endpoint)):
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"{flag} {url!r}: need a base URL such as http://127.0.0.1:8000")
    if not (is_finite_number(cfg.timeout_s) and cfg.timeout_s > 0):
        raise InvalidInput(f"--timeout {cfg.timeout_s}: must be a finite number of seconds > 0")
    for flag, count in (("--max-concurrency", cfg.max_concurrency), ("--client-workers", cfg.client_workers)):
        if count is not None and count < 1:
            raise InvalidInput(f"{flag} {count}: must be >= 1")
    _check_sampling(cfg)
    if cfg.batch_barrier and workload.arrival["process"] != "closed":
        raise InvalidInput("static batches (batch barrier) need a closed-loop workload, "
                           f"not {workload.arrival['process']!r}")
    unknown_slo = sorted(set(cfg.slo) - set(SLO_KEYS))
    if unknown_slo:
        raise InvalidInput(f"unknown SLO keys {unknown_slo}", hint=f"use {', '.join(SLO_KEYS)}")
    for key, bound in cfg.slo.items():
        if not (is_finite_number(bound) and bound > 0):
            raise InvalidInput(f"--slo {key}={bound}: an SLO is a finite number of milliseconds > 0")
    for name, limit in cfg.validity.to_dict().items():
        if not is_finite_number(limit):
            raise InvalidInput(f"validity limit {name} {limit}: must be a finite number")
    fields = {
        "--semantic-id": ("$defs/identity/properties/semantic_id", cfg.semantic_id),
        "--run-label": ("$defs/identity/properties/run_label", cfg.run_label),
        "--profile-id": ("$defs/environment/properties/profile_id", cfg.profile_id),
        "--backend-name": ("$defs/environment/properties/backend/properties/name", cfg.backend_name),
        "--backend-version": ("$defs/environment/properties/backend/properties/version", cfg.backend_version),
        "runtime": ("$defs/environment/properties/runtime", cfg.runtime),
    }
    if cfg.run_id is not None:
        fields["--run-id"] = ("$defs/identity/properties/run_id", cfg.run_id)
    for flag, (rule, value) in fields.items():
        if problem := value_problem(RESULT_SCHEMA, rule, value):
            raise InvalidInput(f"{flag}: {problem}")
    if unrecordable := find_problem(recorded_settings(cfg)):
        raise InvalidInput(f"cannot record the run's settings: {unrecordable[1]} at {unrecordable[0]}")
    if (
        cfg.tokenizer_path is not None
        and not (Path(cfg.tokenizer_path) / "tokenizer.json").is_file()
        and not (Path(cfg.tokenizer_path).is_file())
    ):
        raise InvalidInput(f"--tokenizer {cfg.tokenizer_path}: no tokenizer.json there")
    check_workload_limits(workload)
    if cfg.api == "completions" and any(r.prompt is None for r in workload.requests):
        raise InvalidInput(f"workload {workload.kind!r} holds chat messages; run it with --api chat")
    if workload.arrival["process"] == "closed":
        return cfg.max_concurrency or workload.arrival["concurrency"], None
    return None, cfg.max_concurrency


def check_workload_limits(workload: Workload) -> None:
    """What ``infkit workload make`` enforces holds for every workload that is run, however it was made."""
    if len(workload.requests) > MAX_REQUESTS:
        raise InvalidInput(f"workload: {len(workload.requests)} requests; at most {MAX_REQUESTS}")
    for r in workload.requests:
        for name, value in (("input_tokens", r.input_tokens), ("output_tokens", r.output_tokens)):
            if not 1 <= value <= MAX_TOKENS:
                shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
                raise InvalidInput(
                    f"workload request {r.index}: {name} {shown} is outside [1, {MAX_TOKENS}]",
                    hint="`infkit workload make` never writes such a request",
                )


def _check_sampling(cfg: MeasureConfig) -> None:
    """The samplers' intervals and the stated GPU-hour price."""
    if not (is_finite_number(cfg.gauge_interval_s) and cfg.gauge_interval_s > 0):
        raise InvalidInput("the gauge poll interval must be a finite number of seconds > 0")
    if not (is_finite_number(cfg.gpu_interval_s) and cfg.gpu_interval_s > 0):
        raise InvalidInput(f"GPU sampling interval {cfg.gpu_interval_s}: must be a finite number of seconds > 0")
    if cfg.usd_per_gpu_hour is not None and not (is_finite_number(cfg.usd_per_gpu_hour) and cfg.usd_per_gpu_hour >= 0):
        raise InvalidInput(f"--usd-per-gpu-hour {cfg.usd_per_gpu_hour}: must be a finite price in USD >= 0")


CALLBACKS = ("memory_probe", "cpu_probe", "server_alive", "failure_refiner", "reporter")


def recorded_settings(cfg: MeasureConfig) -> dict[str, Any]:
    """The settings a result records as requested: every field but the callbacks and the extra details."""
    no_callbacks: dict[str, Any] = dict.fromkeys(CALLBACKS)
    plain = dataclasses.replace(cfg, **no_callbacks)
    # gpu_idle is what the devices were found in, not a setting: the result has it under gpu_telemetry
    return {k: v for k, v in dataclasses.asdict(plain).items() if k not in (*CALLBACKS, "extra_details", "gpu_idle")}
