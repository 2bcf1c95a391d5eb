"""Proposal: identical greedy outputs, counted target passes, per-arm figures, proposal.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cuda.models import load_causal_lm
from harness.cuda.proposal import PassCounter, truncated_draft
from harness.cuda.proposal_report import arm_figures


def test_target_only_greedy_uses_one_pass_per_token(torch):
    loaded = load_causal_lm("tiny", device="cpu")
    counter = PassCounter(loaded.model)
    ids = loaded.tokenizer("the model token cache", return_tensors="pt").input_ids
    out = loaded.model.generate(input_ids=ids, do_sample=False, max_new_tokens=7, pad_token_id=2)
    counter.remove()
    assert out.shape[1] - ids.shape[1] == 7
    assert counter.count == 7  # one prefill + six decode steps


def test_truncated_draft_shares_the_target_weights(torch):
    target = load_causal_lm("tiny", device="cpu").model
    draft = truncated_draft(target, 2)
    assert len(draft.model.layers) == 2 and draft.config.num_hidden_layers == 2
    assert draft.model.layers[1] is target.model.layers[1]
    assert draft.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        h = target.model.embed_tokens(ids)
        assert torch.equal(draft(input_ids=ids).logits, draft(input_ids=ids).logits)
        assert draft(input_ids=ids).logits.shape == target(input_ids=ids).logits.shape
    assert h.shape[-1] == target.config.hidden_size


def test_arm_figures_from_hand_records():
    def rec(arm, prompt, rnd, ms, new, passes, same=True):
        return {"arm": arm, "prompt": prompt, "round": rnd, "timed": True, "latency_ms": ms, "new_tokens": new,
                "target_passes": passes, "identical_to_target": same}

    calls = [rec("target", 0, 0, 100.0, 8, 8), rec("target", 1, 0, 200.0, 8, 8),
             rec("constant", 0, 0, 50.0, 8, 2), rec("constant", 1, 0, 400.0, 8, 4)]
    f = arm_figures("constant", calls)
    assert f["target_forward_passes"] == 6 and f["tokens_per_target_pass"] == pytest.approx(16 / 6)
    assert f["accepted_tokens_per_pass"] == pytest.approx(10 / 6)
    assert f["speedup_vs_target"] == pytest.approx((2.0 + 0.5) / 2)  # median of per-pair ratios
    assert f["net_benefit_ms"] == pytest.approx(150.0 - 225.0)
    assert f["identical_to_target"] is True


def _check_run(out, valid, arms):
    valid(out.run_dir / "result.json")
    valid(out.run_dir / "run.json")
    valid(out.run_dir / "proposal.json")
    figures = {a["arm"]: a for a in json.loads((out.run_dir / "proposal.json").read_text())["arms"]}
    assert set(figures) == set(arms)
    assert figures["target"]["tokens_per_target_pass"] == 1.0
    assert all(f["identical_to_target"] for f in figures.values())
    assert out.result["correctness"]["quality"] == {
        "metric": "greedy_agreement", "value": 1.0, "threshold": 1.0, "passed": True,
        "reference": "target-only greedy decoding of the same prompt"}
    return figures


def test_tiny_run_all_arms_identical(run_cuda, valid):
    out = run_cuda("proposal", model="tiny", draft_layers=2, prompts=2, max_new_tokens=12, iters=1, warmup=0)
    figures = _check_run(out, valid, ("target", "constant", "heuristic", "dynamic", "prompt_lookup"))
    assert figures["constant"]["target_forward_passes"] < figures["constant"]["new_tokens"]
    samples = (out.run_dir / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 2 * 5  # one record per generate call
    doc = json.loads((out.run_dir / "proposal.json").read_text())  # random weights: the speculative bench may not cite
    assert doc["citable"] is False and "random" in doc["not_citable_reason"]


def _real_model_dir() -> Path | None:
    if os.environ.get("INFKIT_SMOLLM2_DIR"):
        return Path(os.environ["INFKIT_SMOLLM2_DIR"])
    try:
        from harness.models import ensure_model, find_model
    except ImportError:
        pytest.skip("harness.models (model preparation) is not part of this checkout")
    found = find_model("smollm2-135m")
    if found is None and os.environ.get("INFKIT_REQUIRE_SLOW") == "1":
        found = ensure_model("smollm2-135m")  # CI prepares it; a developer machine skips instead
    return Path(found.path) if found else None


@pytest.mark.slow
@pytest.mark.serverless
def test_real_smollm2_outputs_identical_and_passes_counted(run_cuda, valid, require):
    model_dir = _real_model_dir()
    if model_dir is None:
        require("INFKIT_REQUIRE_SLOW", "SmolLM2-135M not prepared (infkit model prepare, or INFKIT_SMOLLM2_DIR)")
    # 24 of 30 layers: a truncation that agrees with the target often enough to accept drafts
    out = run_cuda("proposal", model=str(model_dir), draft_layers=24, prompts=2, max_new_tokens=32, iters=1, warmup=0,
                   threads=1)
    figures = _check_run(out, valid, ("target", "constant", "heuristic", "dynamic", "prompt_lookup"))
    assert figures["target"]["target_forward_passes"] == figures["target"]["new_tokens"]
    assert json.loads((out.run_dir / "proposal.json").read_text())["citable"] is True
    assert figures["constant"]["tokens_per_target_pass"] > 1.0
    assert out.result["identity"]["model"]["version"].startswith("sha256:")


def test_unset_size_takes_the_device_default_and_says_so():
    from harness.cuda.proposal import DEVICE_SIZES, ProposalConfig, size_record

    requested = ProposalConfig(model="tiny")
    cpu, gpu = requested.sized_for("cpu"), requested.sized_for("cuda")
    assert (cpu.prompts, cpu.max_new_tokens) == (2, 24) and (gpu.prompts, gpu.max_new_tokens) == (4, 64)
    assert DEVICE_SIZES["gpu"] == {"prompts": 4, "max_new_tokens": 64}  # the GPU size is unchanged
    record = size_record(requested, cpu, "cpu")
    assert record["requested"] == {"prompts": None, "max_new_tokens": None}
    assert record["effective"] == {"prompts": 2, "max_new_tokens": 24}
    assert "CPU fallback default" in record["note"]
    given = ProposalConfig(model="tiny", prompts=3, max_new_tokens=40)
    assert given.sized_for("cpu") == given  # what is asked for is what runs, on any device
    assert size_record(given, given, "cpu")["note"] == "as requested"


def test_cpu_run_records_requested_and_effective_size(run_cuda, valid):
    out = run_cuda(
        "proposal", model="tiny", draft_layers=2, prompts=1, iters=1, warmup=0, arms=("target", "prompt_lookup")
    )
    size = out.result["details"]["size"]
    assert size["requested"] == {"prompts": 1, "max_new_tokens": None}
    assert size["effective"] == {"prompts": 1, "max_new_tokens": 24} and size["sized_for"] == "cpu"
    run = json.loads((out.run_dir / "run.json").read_text())
    assert run["requested"]["max_new_tokens"] is None and run["effective"]["max_new_tokens"] == 24
    assert "size: 1 prompts x 24 tokens" in (out.run_dir / "summary.txt").read_text()


def test_heuristic_draft_length_and_threshold_are_reset_before_every_call(torch):
    """transformers writes the heuristic length back onto the draft: the next prompt would start from it."""
    from harness.cuda.proposal import ProposalConfig, _make_drafts, generate_once

    loaded = load_causal_lm("tiny", device="cpu")
    config = ProposalConfig(model="tiny", draft_layers=2, prompts=1, max_new_tokens=12, arms=("heuristic",))
    drafts = _make_drafts(loaded, config)
    counter = PassCounter(loaded.model)
    enc = loaded.tokenizer("the cat sat on the mat", return_tensors="pt")
    drafts["heuristic"].generation_config.num_assistant_tokens = 17  # what an earlier call may leave behind
    try:
        seen = []
        original = loaded.model.generate

        def spy(*args, **kwargs):
            seen.append(kwargs["assistant_model"].generation_config.num_assistant_tokens)
            return original(*args, **kwargs)

        loaded.model.generate = spy
        call = generate_once(loaded, counter, enc.input_ids, enc.attention_mask, "heuristic", config, drafts, "cpu")
    finally:
        counter.remove()
    assert seen == [config.num_assistant_tokens]
    assert set(call["draft_state_after"]) == {"num_assistant_tokens", "assistant_confidence_threshold"}
