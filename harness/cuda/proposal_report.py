"""Per-arm figures of the proposal experiment, its result groups and ``proposal.json``.

Pure over the per-call records (one per generate call, as in samples.jsonl):
speedup is paired per (prompt, round) as target latency / arm latency and
summarised by its median; net benefit is the target's median call latency
minus the arm's (positive: the arm is faster).
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.contract import Conclusion, Correctness, Failure, Performance, atomic_write_json
from harness.contract.distribution import distribution_ms
from harness.contract.schemas import validate_document
from harness.cuda.runner import Outcome, RunContext, mechanism_workload
from harness.errors import SchemaViolation

PROPOSAL_SCHEMA = "infkit/proposal/v1"


def arm_figures(arm: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency, passes and agreement of one arm over its timed calls, paired against ``target``."""
    mine = [c for c in calls if c["arm"] == arm and c["timed"]]
    target = {(c["prompt"], c["round"]): c for c in calls if c["arm"] == "target" and c["timed"]}
    new_tokens = sum(c["new_tokens"] for c in mine)
    passes = sum(c["target_passes"] for c in mine)
    ratios = [target[(c["prompt"], c["round"])]["latency_ms"] / c["latency_ms"] for c in mine]
    latency = distribution_ms([c["latency_ms"] for c in mine])
    target_p50 = distribution_ms([c["latency_ms"] for c in target.values()])["p50"]
    every = [c for c in calls if c["arm"] == arm]
    return {
        "arm": arm,
        "calls": len(mine),
        "latency_ms": latency,
        "new_tokens": new_tokens,
        "target_forward_passes": passes,
        "tokens_per_target_pass": new_tokens / passes,
        "accepted_tokens_per_pass": (new_tokens - passes) / passes,
        "identical_to_target": all(c["identical_to_target"] for c in every),
        "mismatched_calls": sum(not c["identical_to_target"] for c in every),
        "calls_past_max_new_tokens": sum(c.get("tokens_past_max", 0) > 0 for c in every),
        "speedup_vs_target": statistics.median(ratios),
        "net_benefit_ms": target_p50 - latency["p50"],
    }


def build_outcome(config, ctx: RunContext, loaded, arms: list[str], calls: list[dict[str, Any]],
                  prompt_lengths: list[int], settings: dict[str, dict], torch_version: str,
                  size: dict[str, Any]) -> Outcome:
    figures = [arm_figures(a, calls) for a in arms]
    for f in figures:
        f["settings"] = settings[f["arm"]]
    mismatched = [f["arm"] for f in figures if not f["identical_to_target"]]
    failure = None
    if mismatched:
        failure = Failure(stage="run", kind="correctness",
                          message=f"greedy output differs from target-only decoding for: {', '.join(mismatched)}")
    best = max((f for f in figures if f["arm"] != "target"), key=lambda f: f["speedup_vs_target"], default=None)
    _write_proposal_doc(ctx, config, loaded, figures, torch_version)
    timed = [c for c in calls if c["timed"]]
    agree_frac = sum(c["identical_to_target"] for c in calls) / len(calls)
    lines = [f"{'arm':<15}{'p50_ms':>10}{'p95_ms':>10}{'tok/pass':>9}{'acc/pass':>9}{'speedup':>9}"
             f"{'benefit_ms':>11}  identical"]
    for f in figures:
        lines.append(f"{f['arm']:<15}{f['latency_ms']['p50']:>10.1f}{f['latency_ms']['p95']:>10.1f}"
                     f"{f['tokens_per_target_pass']:>9.2f}{f['accepted_tokens_per_pass']:>9.2f}"
                     f"{f['speedup_vs_target']:>8.2f}x{f['net_benefit_ms']:>11.1f}  {f['identical_to_target']}")
    evidence = "repeated" if config.iters >= 3 else "single"
    verdict = (f"best arm {best['arm']}: {best['speedup_vs_target']:.2f}x vs target-only "
               f"({'a net benefit' if best['speedup_vs_target'] > 1 else 'no net benefit'} on {ctx.device})"
               ) if best else "target only"
    return Outcome(
        run_label=f"proposal/{loaded.model_ref['name']}/draft-{config.draft_layers}L",
        workload=mechanism_workload(
            config.seed, "one generate call at a time", request_count=len(timed), concurrency=1,
            input_lengths=tuple(c["prompt_tokens"] for c in timed),
            output_lengths=tuple(c["new_tokens"] for c in timed)),
        performance=Performance.not_applicable(
            "in-process generate calls: per-arm call latency is in details.arms[].latency_ms"),
        correctness=Correctness(
            output_count=len(calls),
            termination_counts={"stop": sum(c["stopped"] for c in calls),
                                "length": sum(not c["stopped"] for c in calls)},
            output_tokens_requested=config.max_new_tokens * len(calls),
            output_tokens_reported=sum(c["new_tokens"] for c in calls),
            quality={"metric": "greedy_agreement", "value": agree_frac, "threshold": 1.0, "passed": not mismatched,
                     "reference": "target-only greedy decoding of the same prompt"}),
        conclusion=Conclusion(
            evidence_level=evidence, repeats=config.iters if evidence == "repeated" else None,
            decision="blocked" if failure else "inconclusive", failure=failure, summary=verdict,
            next_step="measure on the target GPU (benchmarks/gpu_check.sh), where a net benefit is expected"
            if ctx.device == "cpu" else "hand proposal.json to the speculative bench for a paired comparison"),
        details={"draft": {"kind": "truncated_target", "layers": config.draft_layers},
                 "prompts": len(prompt_lengths), "prompt_tokens": prompt_lengths,
                 "max_new_tokens": config.max_new_tokens,
                 "dtype": config.dtype, "arms": figures, "proposal_document": "proposal.json",
                 "speedup_estimator": "median over (prompt, round) of target latency / arm latency", "size": size},
        summary_lines=(f"size: {config.prompts} prompts x {config.max_new_tokens} tokens ({size['note']})", *lines),
        effective={"arms": arms, "draft_layers": config.draft_layers, "model_source": loaded.source,
                   "dtype": config.dtype,
                   "prompts": config.prompts, "max_new_tokens": config.max_new_tokens, "size": size},
        model=loaded.model_ref, tokenizer=loaded.tokenizer_ref,
    )


def citability(source: str) -> dict[str, Any]:
    """Whether the speculative bench may cite the figures: not from a random-weight target, whose drafts' acceptance
    (and so tokens per target pass) says nothing about any served model."""
    if source == "tiny":
        return {"citable": False, "not_citable_reason": "made on the seeded random tiny Llama (random weights): its "
                "acceptance predicts nothing about a served model; run the proposal on a real checkpoint "
                "(PROPOSAL_MODEL=<checkpoint dir>)"}
    return {"citable": True}


def _write_proposal_doc(ctx: RunContext, config, loaded, figures: list[dict], torch_version: str) -> None:
    doc = {
        "schema": PROPOSAL_SCHEMA,
        "semantic_id": "INF-PROPOSAL",
        "run_id": ctx.run_dir.name,
        "device": ctx.device,
        "torch": torch_version,
        "model": loaded.model_ref,
        "tokenizer": loaded.tokenizer_ref,
        "draft": {"kind": "truncated_target", "layers": config.draft_layers},
        "decoding": {"greedy": True, "max_new_tokens": config.max_new_tokens, "dtype": config.dtype},
        "baseline_arm": "target",
        "arms": [{k: f[k] for k in ("arm", "settings", "calls", "latency_ms", "new_tokens", "target_forward_passes",
                                    "tokens_per_target_pass", "accepted_tokens_per_pass", "identical_to_target",
                                    "speedup_vs_target", "net_benefit_ms")} for f in figures],
        **citability(loaded.source),
    }
    problems = validate_document(doc)
    if problems:
        raise SchemaViolation("proposal.json does not satisfy its schema: " + "; ".join(map(str, problems)))
    atomic_write_json(ctx.run_dir / "proposal.json", doc)
