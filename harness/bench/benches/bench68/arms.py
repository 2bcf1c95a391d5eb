"""bench-68's parts that are not data: its speculative arms, paired steps, the cited proposal and the reading.

The decision rule is ``table.RULE`` (the primary copy row decides, the others are Holm-corrected,
a row whose greedy outputs differ is rejected) and the negative control's is ``control.RULE`` (an n-gram adopt needs
prompt lookup's acceptance on natural text to stay low); both are stated in every result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.bench.analysis import arm_values, blocked_reading, claim_effect, claim_figures
from harness.bench.benches.bench68.acceptance import (
    agreement,
    draft_cost_ratio,
    fit_verify_cost,
    fit_verify_cost_interval,
    pooled_acceptance,
    predict,
    reference_outputs,
)
from harness.bench.benches.bench68.control import CONTROL, WORKLOADS, cap_ngram, negative_control
from harness.bench.benches.bench68.coresidence import co_residence
from harness.bench.benches.bench68.identity import identities, identity_record
from harness.bench.benches.bench68.table import Row, decide_top, row_lines
from harness.bench.lib.citations import Citation, cite, latest_manifest
from harness.bench.lib.prediction import summarise
from harness.bench.metrics import E2E_P50, OUTPUT_TOKENS_PER_S, TPOT, TPOT_P50, Metric
from harness.bench.placement import planning_only
from harness.bench.records import Reading
from harness.bench.spec import Arm, Claim, History, Plan, Schedule, Step
from harness.contract.schemas import validate_document
from harness.cuda.models import RANDOM_TINY
from harness.errors import InvalidInput
from harness.mech.specdec.formulas import get_topology
from harness.models.draft import draft_dir, ensure_draft

PROPOSAL_ID, PROPOSAL_FILE = "INF-PROPOSAL", "proposal.json"


@dataclass(frozen=True)
class SpecArm:
    """One speculative server variant: its --speculative-config and what the prediction assumes."""

    name: str
    config: dict[str, Any]
    gamma: int
    cost_ratio: float
    cost_source: str
    kind: str  # ngram, draft, self, eagle, eagle3, mtp
    note: str = ""
    draft: dict[str, Any] = field(default_factory=dict)
    workloads: tuple[str, ...] = WORKLOADS  # copy on every arm; the n-gram arm proposing most also runs the control


def spec_arms(cfg: Any, model: Any) -> list[SpecArm]:
    """The speculative variants the config asks for (the truncated draft is made here, once, and hashed)."""
    arms = [SpecArm(f"ngram-k{k}", {"method": "ngram", "num_speculative_tokens": k,
                                    "prompt_lookup_min": cfg.prompt_lookup_min,
                                    "prompt_lookup_max": cfg.prompt_lookup_max},
                    k, 0.0, "stated: n-gram lookup runs outside the model, c = 0", "ngram",
                    workloads=(*WORKLOADS, CONTROL) if k == max(cfg.ngram_tokens) else WORKLOADS)
            for k in dict.fromkeys(cfg.ngram_tokens)]
    target = json.loads((Path(model.path) / "config.json").read_text(encoding="utf-8"))
    if cfg.draft_layers:
        draft = planned_draft(model, cfg.draft_layers) if planning_only() else ensure_draft(model, cfg.draft_layers)
        arms.append(SpecArm(
            f"draft-{cfg.draft_layers}L", {"method": "draft_model", "model": str(draft.path),
                                           "num_speculative_tokens": cfg.draft_tokens},
            cfg.draft_tokens, draft_cost_ratio(target, cfg.draft_layers),
            f"stated: weights per token, {cfg.draft_layers} of {target['num_hidden_layers']} layers plus the LM head",
            "draft", f"the first {cfg.draft_layers} layers of {model.name}",
            {"path": str(draft.path), "layers": cfg.draft_layers, "checkpoint_sha256": draft.checkpoint_sha256,
             "source_checkpoint_sha256": model.checkpoint_sha256, "tokenizer_sha256": draft.tokenizer_sha256}))
    if cfg.self_draft:
        arms.append(SpecArm("self-draft", {"method": "draft_model", "model": str(model.path),
                                           "num_speculative_tokens": cfg.draft_tokens},
                            cfg.draft_tokens, 1.0, "stated: the draft is the target, c = 1", "self",
                            "the served model as its own draft: the acceptance ceiling"))
    for kind, path in (("eagle", cfg.eagle_model), ("eagle3", cfg.eagle3_model), ("mtp", cfg.mtp or None)):
        if path:
            config = {"method": kind, "num_speculative_tokens": cfg.draft_tokens}
            if kind != "mtp":
                config["model"] = str(Path(path).resolve())
            topo = get_topology("mtp" if kind == "mtp" else "eagle")
            arms.append(SpecArm(kind, config, cfg.draft_tokens, topo.cost_ratio,
                                f"stated: the simulator's illustrative {topo.name} cost ratio", kind,
                                "written for the GPU image (vllm backend)"))
    return arms


def planned_draft(model: Any, layers: int) -> Any:
    """The draft a run would make, named and not made (a dry run writes nothing); its hashes are unknown yet."""
    from dataclasses import replace

    return replace(model, name=f"{model.name}-{layers}L", path=draft_dir(model, layers), checkpoint_sha256="",
                   tokenizer_sha256="")


def paired_steps(pairs: Sequence[tuple[Arm, Arm]], repeats: int, variant: str) -> Callable[[History], Iterator[Step]]:
    """(baseline, variant) per workload, the order alternating per repeat; the variant runs first in repeat 1,
    so a variant the engine refuses is known before any baseline arm is spent on it."""
    def steps(history: History) -> Iterator[Step]:
        for repeat in range(1, repeats + 1):
            for base, spec in pairs:
                for arm in ((spec, base) if repeat % 2 else (base, spec)):
                    if variant in history.refused:
                        return
                    yield repeat, arm
    return steps


def cited_proposal(manifest: str | None, root: Path) -> tuple[Citation | None, str]:
    """The audited cuda-proposal run to compare with, or None and why none is cited."""
    if manifest == "none":
        return None, "not cited (--proposal-manifest none)"
    path = Path(manifest) if manifest else latest_manifest(root, PROPOSAL_ID, holding=PROPOSAL_FILE)
    if path is None:
        return None, (f"none cited: no {PROPOSAL_ID} run holding {PROPOSAL_FILE} under "
                      f"{root / 'manifests' / PROPOSAL_ID} (make cuda-proposal signs one)")
    citation = cite(path, root, semantic_id=PROPOSAL_ID)
    doc_path = citation.file(PROPOSAL_FILE)
    if not doc_path.is_file():
        raise InvalidInput(f"cited manifest {path} is an {PROPOSAL_ID} run without {PROPOSAL_FILE}",
                           hint="cite a cuda-proposal run (make cuda-proposal)")
    doc = json.loads(doc_path.read_text(encoding="utf-8"))
    problems = validate_document(doc)
    if problems:
        raise InvalidInput(f"{doc_path}: not a valid proposal document: {problems[0]}")
    why_not = not_citable(doc)
    if why_not and manifest:
        raise InvalidInput(f"cited manifest {path}: its {PROPOSAL_FILE} is not citable: {why_not}",
                           hint="cite a proposal run made on a real checkpoint, or --proposal-manifest none")
    if why_not:
        return None, f"none cited: the newest {PROPOSAL_ID} run ({path}) is not citable: {why_not}"
    return citation, f"cited {path}"


def not_citable(doc: dict[str, Any]) -> str | None:
    """Why a proposal document predicts nothing about a served model (its own mark; older documents by their
    random-weight target), or None."""
    if doc.get("citable") is False:
        return str(doc.get("not_citable_reason") or "marked not citable")
    if doc["model"]["name"] == RANDOM_TINY:
        return f"made on {doc['model']['name']} (random weights): its acceptance predicts nothing about a served model"
    return None


def proposal_lines(citation: Citation | None, why: str, arms: Sequence[SpecArm], cfg: Any) -> tuple[list[str], dict]:
    """What the cited proposal run predicts for the served arms: its tokens per target pass through the formula."""
    if citation is None:
        return [f"proposal.json: {why}"], {"cited": None, "reason": why}
    doc = json.loads(citation.file(PROPOSAL_FILE).read_text(encoding="utf-8"))
    by_arm = {a["arm"]: a for a in doc["arms"]}
    lines = [f"proposal.json: {why} (sha256 {citation.sha256}, run {doc['run_id']} on {doc['device']}, "
             f"draft {doc['draft']['layers']} layers)"]
    predictions = []
    for sa in arms:
        source = "prompt_lookup" if sa.kind == "ngram" else "constant" if (
            sa.kind == "draft" and doc["draft"]["layers"] == cfg.draft_layers) else None
        if source not in by_arm:
            continue
        e = by_arm[source]["tokens_per_target_pass"]
        predicted = e / (sa.gamma * sa.cost_ratio + 1)
        predictions.append({"arm": sa.name, "proposal_arm": source, "tokens_per_target_pass": e,
                            "predicted_speedup": round(predicted, 6),
                            "transformers_speedup": by_arm[source]["speedup_vs_target"]})
        lines.append(f"  {sa.name}: Transformers {source} measured E = {e:.2f} tokens/pass -> S = E/(g*c+1) = "
                     f"{predicted:.2f}x (its own measured speedup there {by_arm[source]['speedup_vs_target']:.2f}x)")
    return lines, {"cited": citation.to_dict(Path.cwd()), "predictions": predictions}


def read_speculative(cfg: Any, arms: Sequence[SpecArm], proposal: tuple[Citation | None, str],
                     dtype: str) -> Callable[[History], Reading]:
    """The reading: one row per workload x variant, the predictions, the proposal citation, the decision
    (``dtype``: what the measured arms serve, which says where greedy identity is judged)."""
    def reading(history: History) -> Reading:
        rows, claims, beta = speculative_rows(history, cfg, arms, dtype)
        control = negative_control(rows, cfg.control_max_acceptance, cfg.control_max_copy_share, history.runs)
        rows = cap_ngram(rows, control, [a.name for a in arms if a.kind == "ngram"])
        top = decide_top(rows)
        prop_lines, prop_details = proposal_lines(*proposal, arms, cfg)
        rows = list(top.rows) or rows  # with the primary row named and the secondaries' Holm-adjusted p
        shift = co_residence(history.runs, [a.name for a in arms], seed=cfg.seed + 500, resamples=cfg.resamples)
        lines = ["", *row_lines(rows), verify_cost_line(beta), control["text"],
                 *shift["lines"], "", *prop_lines, "", *top.lines]
        details = {"speculative": [r.to_dict() for r in rows], "claims": claims, "decision_rule": top.rule,
                   "arms": [{"name": a.name, "speculative_config": a.config, "kind": a.kind, "gamma": a.gamma,
                             "cost_ratio": a.cost_ratio, "cost_source": a.cost_source, "note": a.note,
                             "draft": a.draft or None} for a in arms],
                   "proposal": prop_details, "verify_cost": beta, "negative_control": control,
                   "identity": identity_record(dtype, cfg.identity_min_exact_share),
                   "co_residence": {k: v for k, v in shift.items() if k != "lines"},
                   "prediction_summary": summarise([j for j in (r.judged() for r in rows) if j is not None])}
        cdf = tuple(Claim(E2E_P50, f"{r.workload}/off@{r.arm}", f"{r.workload}/{r.arm}") for r in rows)
        figures = claim_figures(history, Plan((), (), (), Schedule((), ""), claims=cdf),
                                "bench-68 INF-SPECULATIVE-BENCH")
        blocked = blocked_reading(history, None, cfg.repeats)
        if blocked is not None:
            blocked = replace(blocked, details=details, lines=tuple(lines), figures=figures, quality=top.quality)
            return blocked
        # a greedy mismatch is a finding about the variant, not a failed run: its rows read "reject (outputs
        # differ)", the primary's decides the top level, and the quality record fails
        return Reading(evidence_level=top.evidence_level, decision=top.decision, summary=top.summary,
                       effect=top.effect, repeats=cfg.repeats, details=details, lines=tuple(lines),
                       figures=figures, headline=tuple(top.headline), quality=top.quality)
    return reading


def verify_cost_line(fitted: dict) -> str:
    interval = fitted["interval"]
    span = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
    return f"verification cost b {fitted['value']:.3f}{span}: {fitted['source']} ({', '.join(fitted['from']) or '-'})"


TPOT_MEAN = Metric("tpot_ms.mean", "TPOT mean ms", "lower", ".1f", TPOT, lambda a: float(np.mean(a)))


def speculative_rows(history: History, cfg: Any, arms: Sequence[SpecArm], dtype: str
                     ) -> tuple[list[Row], list[dict], dict]:
    """One row per workload x variant: paired effects (E2E p50, TPOT p50, mean TPOT), acceptance, agreement and
    the prediction with the verification cost β fitted on the self-draft arm (``fit_verify_cost``)."""
    runs, parts, claims = history.runs, [], []
    for i, sa in enumerate(arms):
        for j, workload in enumerate(sa.workloads):
            base, spec, seed = f"{workload}/off@{sa.name}", f"{workload}/{sa.name}", cfg.seed + 10 * i + j
            # each variant runs on its own start beside the kept-up baseline: a cross-start contrast, repeated, or
            # start-pooled with the host's start variance from bench-00 (at >= 5 repeats)
            metrics = ((0, E2E_P50), (5, TPOT_P50), (7, TPOT_MEAN), (9, OUTPUT_TOKENS_PER_S))
            e2e, tpot, mean, rate = (claim_effect(runs, Claim(m, base, spec), seed=seed + k, resamples=cfg.resamples,
                                                  design="cross-start", start=history.start_control)
                                     for k, m in metrics)
            claims += [c.to_dict() for c in ((tpot, rate) if workload == CONTROL else (e2e, tpot)) if c]
            parts.append((i, j, sa, workload, base, spec, e2e, tpot, mean, pooled_acceptance(runs, spec), rate))
    selves = [(acc, mean.effect) for _, _, sa, _, _, _, _, _, mean, acc, _ in parts
              if sa.kind == "self" and acc and mean]
    fits = [b for b in (fit_verify_cost(acc, 1 / eff.value) for acc, eff in selves) if b is not None]
    beta = float(np.mean(fits)) if fits else 0.0
    # β's interval: the fit at either end of the self-draft arm's served-speedup interval (1 / the mean-TPOT ratio's)
    ends = [e for e in (fit_verify_cost_interval(acc, 1 / eff.ci_high, 1 / eff.ci_low) for acc, eff in selves) if e]
    interval = (float(np.mean([e[0] for e in ends])), float(np.mean([e[1] for e in ends]))) if ends else None
    fitted = {"value": round(beta, 6), "interval": None if interval is None else [round(b, 6) for b in interval],
              "from": [f"{w}/{sa.name}" for _, _, sa, w, *_ in parts if sa.kind == "self"],
              "source": "self-draft arm (c = 1), interval from its served speedup's" if fits else
              "no self-draft arm measured: 0 assumed"}
    judged, described = identities(runs, [a.name for a in arms], {a.name: a.workloads for a in arms}, dtype,
                                   cfg.identity_min_exact_share)
    rows = []
    for i, j, sa, workload, base, spec, e2e, tpot, mean, acc, rate in parts:
        pred = predict(acc, sa.gamma, sa.cost_ratio, sa.cost_source, passes=cfg.mc_passes,
                       seed=cfg.seed + 100 * i + j, verify_cost=beta, verify_cost_interval=interval) if acc else None
        ref = reference_outputs(runs, [f"{workload}/off@{a.name}" for a in arms])
        rows.append(Row(workload=workload, arm=sa.name, refused=history.refused.get(sa.name), e2e=e2e, tpot=tpot,
                        tpot_ms=(arm_values(runs, base, [TPOT_P50])[TPOT_P50.name],
                                 arm_values(runs, spec, [TPOT_P50])[TPOT_P50.name]),
                        e2e_ms=(arm_values(runs, base, [E2E_P50])[E2E_P50.name],
                                arm_values(runs, spec, [E2E_P50])[E2E_P50.name]),
                        acceptance=acc, prediction=pred, agreement=judged[(workload, sa.name)],
                        measured_agreement=described.get((workload, sa.name)),
                        baseline_agreement=agreement(runs, base, ref), requested_tokens=sa.gamma, tpot_mean=mean,
                        calibration=sa.kind == "self" and bool(fits), control=workload == CONTROL,
                        tokens_per_s=rate if workload == CONTROL else None))
    return rows, claims, fitted
