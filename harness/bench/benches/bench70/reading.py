"""bench-70's reading: the paired claims, then each arm's simulator prediction against its measurement,
the priority classes side by side, and the static-batching signature.

- Claims are read by the framework (``read_claims``: paired effects with intervals, ``stats.decide``).
- Predictions (``schedsim``): the step-cost model is fitted from the calibration arm (the profiling
  plan replayed on the bench's own server, at its start) or read from a cited ``step_cost.json``;
  each arm's workload is simulated with that arm's effective engine settings. Held out
  (``heldout``): the calibration's repeat is never judged; the measured figures come from the
  other repeats only. The table states predicted, measured and the error (predicted / measured − 1)
  per arm, large or small; each prediction is judged against the measured figure's own 95 % interval
  (test repeats, then their requests, resampled), and per figure and over every figure the arms'
  mean signed error and MAPE are stated with intervals (the arm resampled) and how many predictions
  fell inside. The headline sentence goes into the conclusion's summary.
- Static signature: the client-driven static batches must leave slots idle (lower mean running,
  running below the concurrency in more of the samples: the saw-tooth in ``occupancy.png``) and
  make requests wait in the client (higher client queue wait) against continuous batching at the
  same concurrency.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
from tabulate import tabulate

from harness.bench.analysis import claim_figures, read_claims
from harness.bench.arms import arm_dir
from harness.bench.benches.bench70.heldout import (
    ArmErrors,
    Split,
    across_arms,
    interval,
    pct_interval,
    replicates,
    rule,
    split_runs,
)
from harness.bench.benches.bench70.predict import (
    CostModel,
    engine_from,
    error,
    fit_from_profile,
    predict,
)
from harness.bench.lib.prediction import Judged, summarise
from harness.bench.metrics import (
    E2E_P50,
    QUEUE_WAIT_P50,
    RUNNING_MEAN,
    TPOT_P50,
    TPOT_P99,
    TTFT_P50,
    TTFT_P99,
    priority_class,
)
from harness.bench.records import ArmRun, Reading, completed_runs
from harness.bench.spec import History, Plan
from harness.client.records import RequestRecord
from harness.errors import InvalidInput
from harness.serving.measure import GAUGES_FILE, REQUESTS_FILE

ALL_FIGURES = "all figures"
COMPARED = (TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, RUNNING_MEAN)
PD_NOTE = ("P/D disaggregation is not served here: no prefill/decode pair is started on this engine, so it stays "
           "simulated (make mech-batching, mode disaggregated)")


@dataclass(frozen=True)
class SchedulerReading:
    """The read rule of bench-70 (a callable of the history, as ``Plan.read`` takes)."""

    plan: Plan
    modes: Mapping[str, str]  # arm label -> simulator client mode (open, closed, barrier)
    title: str
    calibration: str | None = None  # the calibration arm's label (fit at the start), or
    cited: CostModel | None = None  # a cost model from a cited manifest
    gap_s: float = 3.0  # the calibration plan's gap between bursts
    static_pair: tuple[str, str] | None = None  # (static, continuous)
    concurrency: int | None = None
    policy_pair: tuple[str, str] | None = None  # (fcfs, priority)
    classes: Mapping[str, int] | None = None  # class name -> priority value

    def __call__(self, history: History) -> Reading:
        cfg = history.cfg
        reading = read_claims(history, self.plan, seed=cfg.seed, resamples=cfg.resamples, repeats=cfg.repeats)
        cost, why, calibrated_on = self.cost_model(history)
        labels = [label for label in self.modes if completed_runs(history.runs, label)]
        source = (f"cited: {self.cited.source.get('manifest')}" if self.cited else
                  f"the profiling plan on server {calibrated_on.server}" if calibrated_on else why)
        split = split_runs(self.plan, history.runs, labels, calibrated_on, source)
        resamples = min(cfg.resamples, 2000)
        made = {label: self.prediction(history, label, self.modes[label], cost, split, seed=cfg.seed + i)
                for i, label in enumerate(labels) if cost}
        predictions = {label: p for label, (p, _) in made.items()}
        judged = judged_predictions(predictions, [e for _, e in made.values() if e], resamples=resamples,
                                    seed=cfg.seed)
        headline = prediction_headline(split, judged, cost is not None)
        lines = ["", headline, "predicted (simulator, calibrated step costs) vs measured on the held-out repeats, "
                 "error = predicted/measured - 1:",
                 prediction_table(predictions) if predictions else f"no prediction: {why}"]
        lines += [judged_line(f"  {name}", summary) for name, summary in judged.items()]
        details: dict[str, Any] = {"cost_model": cost.to_dict() if cost else None, "predictions": predictions,
                                   "prediction_design": split.to_dict(), "prediction_summary": judged,
                                   "prediction_headline": headline,
                                   "pd_disaggregation": {"served": False, "note": PD_NOTE}}
        if not cost:
            details["prediction_missing"] = why
        if self.policy_pair and self.classes:
            table, details["priority_classes"] = class_table(history, self.policy_pair, self.classes, predictions)
            lines += ["", "per priority class (FCFS vs priority policy):", table]
        if self.static_pair:
            details["static_signature"] = signature = static_signature(history, *self.static_pair, self.concurrency)
            lines += ["", signature["text"]]
        lines += ["", PD_NOTE]
        figures = dict(claim_figures(history, self.plan, self.title))
        if labels:
            figures["occupancy.png"] = lambda path: occupancy_png(history, labels, predictions, path,
                                                                  title=f"{self.title}: occupancy over time")
        reading = replace(reading, summary=f"{reading.summary}; {headline}")
        return reading.with_lines(*lines).with_details(**details).with_figures(figures)

    def cost_model(self, history: History) -> tuple[CostModel | None, str, ArmRun | None]:
        """The step-cost model, why there is none, and the run it was fitted on (None: cited from another run)."""
        if self.cited is not None:
            return self.cited, "", None
        runs = completed_runs(history.runs, self.calibration or "")
        if not runs:
            return None, f"the calibration arm {self.calibration!r} did not complete", None
        run = runs[0]
        engine = engine_from(run_effective(run), run_settings(run))
        source = {"kind": "fitted in this run; its repeat is not judged", "arm": run.label, "repeat": run.repeat,
                  "server": run.server, "requests": str(arm_dir(Path("."), run.label, run.repeat) / REQUESTS_FILE),
                  "plan": f"harness.mech.calibrate.profiling_plan(repeats=1, gap_s={self.gap_s:g})"}
        try:
            return fit_from_profile(run.result_path.parent / REQUESTS_FILE, self.gap_s, engine, source), "", run
        except InvalidInput as exc:  # a degenerate profile (too few completed requests, zero-cost steps)
            return None, f"the step-cost fit to the calibration arm failed: {exc}", run

    def prediction(self, history: History, label: str, mode: str, cost: CostModel, split: Split, *, seed: int
                   ) -> tuple[dict[str, Any], ArmErrors | None]:
        """The arm's prediction, judged on its held-out runs only (none: measured is None, nothing judged)."""
        runs = completed_runs(history.runs, label)
        engine = engine_from(run_effective(runs[0]), run_settings(runs[0]))
        path = history.workloads[runs[0].workload].path
        predicted = predict(path, engine, cost, mode, self.classes if label in (self.policy_pair or ()) else None)
        flat = {m.name: predicted_value(predicted, m.name) for m in COMPARED}
        test = split.runs(runs, label)
        reps = replicates(COMPARED, test, resamples=min(history.cfg.resamples, 2000),
                          rng=np.random.default_rng(seed))
        measured = {m.name: m.value(test) if test else None for m in COMPARED}
        intervals = {m.name: interval(reps[m.name]) if test else None for m in COMPARED}
        inside = {k: (None if v is None or (f := flat[k]) is None else v[0] <= f <= v[1])
                  for k, v in intervals.items()}
        out = {**predicted, "predicted": flat, "measured": measured, "measured_interval": intervals,
               "inside_interval": inside, "error": {k: error(flat[k], measured[k]) for k in flat},
               "judged_on_repeats": [r.repeat for r in test],
               "same_start_as_calibration": [r.repeat for r in test if (label, r.repeat) in split.same_start]}
        if not test:
            return out, None
        known = {k: v for k, v in flat.items() if v is not None}
        return out, ArmErrors(label, known, {k: v for k, v in measured.items() if v is not None}, reps)


def judged_predictions(predictions: Mapping[str, Mapping[str, Any]], errors: Sequence[ArmErrors], *,
                       resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """Per compared figure across arms, and over every figure: inside the measured interval or not, and the mean
    signed error and MAPE with their intervals (``heldout.across_arms``)."""
    out = {}
    for i, m in enumerate(COMPARED):
        rows = [Judged(label, p["predicted"][m.name], p["measured"][m.name], *(p["measured_interval"][m.name] or
                                                                               (None, None)))
                for label, p in predictions.items()
                if p["predicted"][m.name] is not None and p["measured"][m.name]]
        if rows:
            out[m.title] = {**summarise(rows), **across_arms(errors, [m.name], resamples=resamples, seed=seed + i)}
    if out:
        names = [m.name for m in COMPARED]
        out[ALL_FIGURES] = {"inside": sum(s["inside"] for s in out.values()),
                            "with_interval": sum(s["with_interval"] for s in out.values()),
                            **across_arms(errors, names, resamples=resamples, seed=seed + len(names))}
    return out


def judged_line(what: str, summary: Mapping[str, Any]) -> str:
    if not summary["n"]:
        return f"{what}: no prediction to judge"
    return (f"{what}: {summary['inside']}/{summary['with_interval']} inside the measured interval; mean signed "
            f"error {pct_interval(summary['mean_signed_error'], summary['mean_signed_error_interval'], True)}, "
            f"MAPE {pct_interval(summary['mape'], summary['mape_interval'], False)} over {summary['n']} "
            f"({summary['n_arms']} arms)")


def prediction_headline(split: Split, judged: Mapping[str, Mapping[str, Any]], predicted: bool) -> str:
    """One sentence: how the prediction was held out, its bias and MAPE with intervals, and the inside count."""
    if not predicted:
        return "simulator: no prediction"
    every = judged.get(ALL_FIGURES)
    if not every:
        return f"simulator not judged: no held-out run ({rule(split)})"
    return (f"simulator held out ({rule(split, short=True)}): mean signed error "
            f"{pct_interval(every['mean_signed_error'], every['mean_signed_error_interval'], True)}, MAPE "
            f"{pct_interval(every['mape'], every['mape_interval'], False)} over {every['n']} figures of "
            f"{every['n_arms']} arms (95 %, arms resampled); {every['inside']}/"
            f"{every['with_interval']} predictions inside the measured interval")


def run_effective(run: ArmRun) -> dict[str, Any] | None:
    return run.result.detail("server_effective")


def run_settings(run: ArmRun) -> dict[str, Any]:
    return run.result.workload.token_budget


def predicted_value(predicted: Mapping[str, Any], name: str) -> float | None:
    """A compared metric's predicted value: ``ttft_ms.p50`` from the latency block, ``running.mean`` from occupancy."""
    if name == RUNNING_MEAN.name:
        return predicted["occupancy"]["running_mean"]
    key, stat = name.rsplit(".", 1)
    return (predicted.get(key) or {}).get(stat)


def _cell(pred: float | None, meas: float | None, err: float | None, fmt: str) -> str:
    def show(v: float | None) -> str:
        return "-" if v is None else format(v, fmt)
    return f"{show(pred)} / {show(meas)}" + ("" if err is None else f" ({err:+.0%})")


def prediction_table(predictions: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [[label, p["mode"], *(_cell(p["predicted"][m.name], p["measured"][m.name], p["error"][m.name], m.fmt)
                                 for m in COMPARED)] for label, p in predictions.items()]
    headers = ["arm", "client", *(f"{m.title} pred / meas" for m in COMPARED)]
    return tabulate(rows, headers=headers, tablefmt="github")


def class_table(history: History, pair: tuple[str, str], classes: Mapping[str, int],
                predictions: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """TTFT P50/P99, TPOT P50 and E2E P50 per class in the FCFS and priority arms, measured and predicted."""
    rows, out = [], {}
    for name, value in classes.items():
        for label in pair:
            runs = completed_runs(history.runs, label)
            measured = {m.name: priority_class(m, name, value).value(runs)
                        for m in (TTFT_P50, TTFT_P99, TPOT_P50, E2E_P50)}
            pred = (((predictions.get(label) or {}).get("classes") or {}).get(name) or {}).get("ttft_ms", {}).get("p50")
            # a class metric always reads its requests (metrics.where sets its samples)
            samples = cast(Callable[[Sequence[RequestRecord]], list[float]],
                           priority_class(TTFT_P50, name, value).samples)
            n = len(samples([r for run in runs for r in run.records]))
            out[f"{name}/{label}"] = {
                "class": name,
                "priority": value,
                "arm": label,
                "requests": n,
                "measured": measured,
                "predicted_ttft_ms_p50": pred,
            }
            rows.append(
                [
                    name,
                    label,
                    n,
                    *(TTFT_P50.format(v) if v is not None else "-" for v in measured.values()),
                    "-" if pred is None else f"{pred:.0f}",
                ]
            )
    headers = [
        "class",
        "arm",
        "requests",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "E2E p50 ms",
        "predicted TTFT p50",
    ]
    return tabulate(rows, headers=headers, tablefmt="github"), out


def gauge_rows(run: ArmRun) -> list[dict[str, float]]:
    path = run.result_path.parent / GAUGES_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def under_use(runs: Sequence[ArmRun], concurrency: int) -> float | None:
    """Fraction of the polled samples, while anything ran, with fewer than ``concurrency`` requests running."""
    samples = [row["running"] for run in runs for row in gauge_rows(run) if row.get("running")]
    return float(np.mean([v < concurrency for v in samples])) if samples else None


def static_signature(history: History, static: str, continuous: str, concurrency: int | None) -> dict[str, Any]:
    """Is the static baseline's signature in the measurement: idle slots (saw-tooth) and waiting in the client?"""
    s_runs, c_runs = completed_runs(history.runs, static), completed_runs(history.runs, continuous)
    figures: dict[str, Any] = {}
    for key, metric in (("running_mean", RUNNING_MEAN), ("client_queue_wait_ms_p50", QUEUE_WAIT_P50)):
        figures[key] = {static: metric.value(s_runs), continuous: metric.value(c_runs)}
    if concurrency:
        figures["samples_below_concurrency"] = {
            static: under_use(s_runs, concurrency),
            continuous: under_use(c_runs, concurrency),
        }
    run_s, run_c = figures["running_mean"].values()
    wait_s, wait_c = figures["client_queue_wait_ms_p50"].values()
    known = None not in (run_s, run_c, wait_s, wait_c)
    seen = bool(known and run_s < run_c and wait_s > wait_c)
    text = f"static-batching signature {'seen' if seen else 'NOT seen' if known else 'not measurable'}: " + (
        f"mean running {run_s:.2f} ({static}) vs {run_c:.2f} ({continuous}) of {concurrency} slots; "
        f"client queue wait P50 {wait_s:.1f} ms vs {wait_c:.1f} ms; running over time in occupancy.png"
        if known
        else "an arm did not complete or the server exported no running gauge"
    )
    return {
        "seen": seen,
        "static": static,
        "continuous": continuous,
        "concurrency": concurrency,
        "figures": figures,
        "text": text,
    }


def occupancy_png(
    history: History, labels: Sequence[str], predictions: Mapping[str, Mapping[str, Any]], path: Path, *, title: str
) -> Path:
    """Running and waiting requests over time per arm (its first completed repeat), and the simulator's running."""
    from harness.report.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(len(labels), 1, figsize=(9.0, 1.9 * len(labels) + 0.6), dpi=110, squeeze=False)
    for ax, label in zip(axes[:, 0], labels, strict=True):
        run = completed_runs(history.runs, label)[0]
        rows = gauge_rows(run)
        if rows:
            t = [r["t_s"] for r in rows]
            ax.step(t, [r.get("running", 0) for r in rows], where="post", label="running (measured)")
            ax.step(t, [r.get("waiting", 0) for r in rows], where="post", ls=":", label="waiting (measured)")
        series = (predictions.get(label) or {}).get("occupancy_series")
        if series:
            ax.step(
                [s[0] for s in series],
                [s[1] for s in series],
                where="post",
                ls="--",
                alpha=0.7,
                label="running (predicted)",
            )
        ax.set_ylabel(f"{label}\nrequests", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel(
        f"seconds from the run's start (repeat {completed_runs(history.runs, labels[-1])[0].repeat})"
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)
