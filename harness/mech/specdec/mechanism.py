"""The speculative-decoding mechanism run (INF-PROPOSAL / draft architectures): formula grid,
Monte-Carlo check, draft topologies and proposal-budget schedules, one result."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.contract import Conclusion, Correctness, Performance
from harness.knobs import knob
from harness.mech import Mechanism, MechConfig
from harness.mech.output import MechOutput, no_workload, save_figure, table
from harness.mech.specdec.formulas import (
    TOPOLOGIES,
    expected_tokens,
    get_topology,
    simulate_acceptance,
    speedup,
    tree_alphas,
)
from harness.mech.specdec.proposal import SCHEDULES, heuristic_fixed_point, simulate_schedule
from harness.report.plots import pyplot

SIGMAS = 4.0


@dataclass(frozen=True)
class SpecDecConfig(MechConfig):
    alphas: tuple[float, ...] = knob((0.5, 0.6, 0.7, 0.8, 0.9), "acceptance rates of the formula grid",
                                     min=0.0, max=1.0)
    gammas: tuple[int, ...] = knob((1, 2, 3, 4, 5, 6, 8), "draft lengths of the formula grid", min=0)
    cost_ratio: float = knob(0.1, "draft/target cost per token c", min=0.0)
    passes: int = knob(20000, "Monte-Carlo verification passes per cell (>= 100 for a meaningful estimate)",
                       min=100, group="protocol")
    seed: int = knob(0, "base seed of the Monte-Carlo and schedule simulations", min=0, group="protocol")
    topologies: tuple[str, ...] = knob(tuple(TOPOLOGIES), "draft topologies", choices=tuple(TOPOLOGIES))
    schedule_alpha: float = knob(0.8, "acceptance rate for the proposal-schedule comparison", min=0.0, max=1.0,
                                 group="protocol")
    calls: int = knob(20, "generate() calls per schedule", min=1, group="protocol")
    tokens_per_call: int = knob(128, "new tokens per generate() call", min=1, group="protocol")


def formula_grid(cfg: SpecDecConfig) -> list[dict[str, Any]]:
    rows = []
    for i, alpha in enumerate(cfg.alphas):
        for j, gamma in enumerate(cfg.gammas):
            e = expected_tokens(alpha, gamma)
            mc = simulate_acceptance([alpha] * gamma, cfg.passes, seed=cfg.seed + 1000 * i + j)
            rows.append({"alpha": alpha, "gamma": gamma, "expected_tokens": round(e, 6),
                         "speedup": round(speedup(e, gamma, cfg.cost_ratio), 6),
                         "mc_mean": round(mc.mean_tokens, 6), "mc_stderr": round(mc.stderr, 6),
                         "mc_within": mc.within(e, SIGMAS)})
    return rows


def topology_rows(cfg: SpecDecConfig) -> list[dict[str, Any]]:
    rows = []
    for k, name in enumerate(cfg.topologies):
        topo = get_topology(name)
        mc = simulate_acceptance(topo.alphas, cfg.passes, seed=cfg.seed + 7919 * (k + 1), branching=topo.branching)
        alphas = tree_alphas(topo.alphas, topo.branching) if topo.branching else list(topo.alphas)
        rows.append({"topology": name, "gamma": len(topo.alphas), "branching": list(topo.branching or []),
                     "depth_acceptance": [round(a, 6) for a in alphas], "cost_ratio": topo.cost_ratio,
                     "parallel": topo.parallel, "expected_tokens": round(topo.expected(), 6),
                     "draft_cost": round(topo.draft_cost(), 6), "speedup": round(topo.speedup(), 6),
                     "mc_mean": round(mc.mean_tokens, 6), "mc_within": mc.within(topo.expected(), SIGMAS)})
    return rows


def schedule_rows(cfg: SpecDecConfig) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
    rows, traces = [], {}
    for k, name in enumerate(SCHEDULES):
        stats = simulate_schedule(name, cfg.schedule_alpha, cfg.cost_ratio, calls=cfg.calls,
                                  tokens_per_call=cfg.tokens_per_call, seed=cfg.seed + 31 * (k + 1))
        traces[name] = list(stats.draft_lengths)
        row = asdict(stats)
        row.pop("draft_lengths")
        rows.append({k2: round(v, 6) if isinstance(v, float) else v for k2, v in row.items()})
    return rows, traces


def run(cfg: SpecDecConfig) -> MechOutput:
    grid = formula_grid(cfg)
    topo = topology_rows(cfg)
    sched, traces = schedule_rows(cfg)
    fixed_point = heuristic_fixed_point(cfg.schedule_alpha)
    all_within = all(r["mc_within"] for r in grid) and all(r["mc_within"] for r in topo)
    summary = "\n\n".join([
        f"E = (1 - a^(g+1)) / (1 - a); S = E / (g*c + 1) with c = {cfg.cost_ratio}; Monte-Carlo {cfg.passes} "
        f"passes per cell, within {SIGMAS:g} standard errors: {all_within}",
        table(["alpha", "gamma", "E", "S", "MC mean", "MC stderr", "MC ok"],
              [[r["alpha"], r["gamma"], r["expected_tokens"], r["speedup"], r["mc_mean"], r["mc_stderr"],
                r["mc_within"]] for r in grid]),
        "draft topologies (illustrative parameter sets)",
        table(["topology", "gamma", "branching", "E", "draft cost", "S", "MC mean", "MC ok"],
              [[r["topology"], r["gamma"], r["branching"] or "-", r["expected_tokens"], r["draft_cost"],
                r["speedup"], r["mc_mean"], r["mc_within"]] for r in topo]),
        f"proposal schedules at alpha = {cfg.schedule_alpha}; heuristic fixed point alpha^K = 1/3 at "
        f"K = {fixed_point:.3f}",
        table(["schedule", "target passes", "drafted", "accepted", "mean draft len", "tokens/pass", "speedup",
               "threshold"],
              [[r["schedule"], r["target_passes"], r["drafted"], r["accepted"], r["mean_draft_len"],
                r["tokens_per_pass"], r["speedup"], r["final_threshold"]] for r in sched]),
    ])
    best = max(sched, key=lambda r: r["speedup"])
    return MechOutput(
        semantic_id="INF-PROPOSAL", run_label=f"specdec/alpha-{cfg.schedule_alpha}", model=None,
        model_null_reason="acceptance is parameterised; no model runs",
        workload=no_workload("no requests are served", seed=cfg.seed),
        performance=Performance.not_applicable("a speculative-decoding model has no serving latency"),
        correctness=Correctness(output_count=0, termination_counts={}, quality={
            "metric": "monte_carlo_within_4_stderr_of_closed_form", "value": all_within, "passed": all_within}),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="measure acceptance and target passes with assisted generation "
                                        "(make cuda-proposal) and feed project 68",
                              summary=f"best schedule at alpha={cfg.schedule_alpha}: {best['schedule']} "
                                      f"(simulated speedup {best['speedup']:.3f})"),
        details={"formula_grid": grid, "topologies": topo, "schedules": sched,
                 "heuristic_fixed_point": round(fixed_point, 6), "effective": asdict(cfg)},
        summary_text=summary, requested=asdict(cfg),
        plots={"specdec.png": lambda path: _plot(cfg, grid, traces, fixed_point, path)},
    )


def _plot(cfg: SpecDecConfig, grid: list[dict[str, Any]], traces: dict[str, list[int]], fixed_point: float,
          path: Any) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for alpha in cfg.alphas:
        pts = [r for r in grid if r["alpha"] == alpha]
        ax1.plot([r["gamma"] for r in pts], [r["expected_tokens"] for r in pts], label=f"alpha {alpha}")
        ax1.plot([r["gamma"] for r in pts], [r["mc_mean"] for r in pts], "k.", markersize=4)
    ax1.set_xlabel("draft length gamma")
    ax1.set_ylabel("tokens per target pass (line: formula, dots: MC)")
    ax1.legend(fontsize=7)
    for name in ("heuristic", "dynamic"):
        ax2.plot(traces[name][:300], label=name, linewidth=0.8)
    ax2.axhline(fixed_point, color="red", linestyle="--", label="alpha^K = 1/3")
    ax2.set_xlabel("target pass")
    ax2.set_ylabel("draft length")
    ax2.legend(fontsize=7)
    save_figure(fig, path)


MECHANISM = Mechanism("specdec", SpecDecConfig, run,
                      "speculative-decoding formulas, Monte-Carlo, draft topologies and proposal schedules")
