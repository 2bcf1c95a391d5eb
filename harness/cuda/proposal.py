"""Dynamic proposal budget: Transformers assisted generation against target-only greedy decoding.

Arms: ``target`` (greedy, no proposals), ``constant`` / ``heuristic`` /
``dynamic`` (a draft that is the target's own first ``draft_layers`` layers,
sharing its embeddings, norm and head; schedules as in transformers'
``num_assistant_tokens_schedule``, ``dynamic`` = heuristic length plus an
``assistant_confidence_threshold`` that stops drafting early) and
``prompt_lookup`` (n-gram proposals from the prompt). Every call is greedy;
each arm's output must equal the target's token for token. A forward pre-hook
on the target model counts its forward passes (verification passes), so
tokens per pass = new tokens / target passes. Arms are interleaved within each
repeat, rotating their order, so drift on a shared machine hits all of them.

Besides result.json the run writes ``proposal.json`` (``infkit/proposal/v1``),
the versioned document the speculative-bench project consumes via the manifest.

Size: ``--prompts`` and ``--max-new-tokens`` left unset take the device's defaults —
4 prompts x 64 tokens on a GPU, 2 x 24 on the CPU fallback, where every arm's greedy
decoding of SmolLM2 runs a few seconds per call on 2 cores (the GPU size took over 10
minutes there). The run states the size it used next to what was requested.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from harness.cuda.device import import_torch, synchronize
from harness.cuda.models import LoadedModel, load_causal_lm
from harness.cuda.registry import CommonConfig, Experiment
from harness.cuda.runner import Outcome, RunContext
from harness.errors import InvalidInput
from harness.knobs import knob

ARMS = ("target", "constant", "heuristic", "dynamic", "prompt_lookup")
# Prompts with repeated spans (code, lists, restated text) so that prompt lookup has material.
PROMPTS = (
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "def factorial(n):\n    if n < 2:\n        return 1\n",
    "The cache stores the key and value of every token. When the cache is full, the server evicts the least "
    "recently used block. Summarise: the cache stores",
    "Shopping list: apples, bread, milk, eggs, butter. Repeat the shopping list in the same order: apples,",
    "Question: What is the capital of France? Answer: The capital of France is Paris. "
    "Question: What is the capital of Italy? Answer:",
    "import numpy as np\n\ndef mean(values):\n    return np.mean(values)\n\ndef std(values):\n",
    "Once upon a time there was a small model that wanted to become a large model. Every day the small model",
)


@dataclass(frozen=True)
class ProposalConfig(CommonConfig):
    warmup: int = knob(1, "untimed rounds over every prompt and arm", min=0, group="protocol")
    iters: int = knob(3, "timed rounds over every prompt and arm", min=1, group="protocol")
    model: str = knob("smollm2-135m", "target: a prepared model name, a checkpoint directory, or tiny")
    draft_layers: int = knob(10, "the draft is the target's first N layers", min=1)
    prompts: int | None = knob(None, f"how many of the {len(PROMPTS)} built-in prompts to use "
                                     "(default: 4 on a GPU, 2 on CPU)", min=1, max=len(PROMPTS))
    max_new_tokens: int | None = knob(None, "tokens generated per call (default: 64 on a GPU, 24 on CPU)", min=1)
    num_assistant_tokens: int = knob(5, "draft tokens per round (start value for heuristic/dynamic)", min=1,
                                     group="protocol")
    confidence_threshold: float = knob(0.4, "dynamic arm: stop drafting below this draft probability",
                                       min=0.0, max=1.0, group="protocol")
    prompt_lookup_tokens: int = knob(10, "prompt_lookup arm: proposal length", min=1, group="protocol")
    dtype: str = knob("float32", "weights' dtype", choices=("float32", "float16", "bfloat16"))
    arms: tuple[str, ...] = knob(ARMS, "arms", choices=ARMS)

    def sized_for(self, device: str) -> ProposalConfig:
        """This config with every unset size taken from the device's defaults."""
        size = DEVICE_SIZES["cpu" if device == "cpu" else "gpu"]
        return dataclasses.replace(self, prompts=self.prompts or size["prompts"],
                                   max_new_tokens=self.max_new_tokens or size["max_new_tokens"])


# Defaults per device class: the GPU size is the experiment's; the CPU fallback's fits in a
# couple of minutes on 2 cores (benchmarks/gpu_check.sh rehearses it).
DEVICE_SIZES = {"gpu": {"prompts": 4, "max_new_tokens": 64}, "cpu": {"prompts": 2, "max_new_tokens": 24}}


def size_record(requested: ProposalConfig, effective: ProposalConfig, device: str) -> dict[str, Any]:
    """Requested vs effective size, and why they differ (``run.json`` effective, result details)."""
    fields = ("prompts", "max_new_tokens")
    chosen = [f for f in fields if getattr(requested, f) is None]
    note = (f"{' and '.join(f.replace('_', '-') for f in chosen)} not given: the "
            f"{('CPU fallback' if device == 'cpu' else 'GPU')} default "
            f"({', '.join(f'{f}={getattr(effective, f)}' for f in chosen)}) was used") if chosen else "as requested"
    return {"requested": {f: getattr(requested, f) for f in fields},
            "effective": {f: getattr(effective, f) for f in fields}, "sized_for": device, "note": note}


class PassCounter:
    """Counts calls of a module's forward through a pre-hook."""

    def __init__(self, module):
        self.count = 0
        self._handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_args) -> None:
        self.count += 1

    def remove(self) -> None:
        self._handle.remove()


def truncated_draft(target, layers: int):
    """A causal LM that runs the target's first ``layers`` decoder layers; all weights are shared."""
    torch = import_torch()
    if layers >= target.config.num_hidden_layers:
        raise InvalidInput(f"--draft-layers {layers} must be below the target's "
                           f"{target.config.num_hidden_layers} layers")
    config = target.config.__class__.from_dict({**target.config.to_dict(), "num_hidden_layers": layers})
    config._attn_implementation = target.config._attn_implementation
    with torch.device("meta"):
        draft = target.__class__(config)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    if any(t.is_meta for t in (*draft.parameters(), *draft.buffers())):
        raise RuntimeError("draft still holds meta tensors after sharing the target's modules")
    draft.generation_config = target.generation_config.__class__.from_dict(target.generation_config.to_dict())
    return draft.eval()


def arm_settings(arm: str, config: ProposalConfig) -> dict[str, Any]:
    """The generation settings that define an arm (recorded in the result as requested)."""
    if arm == "target":
        return {}
    if arm == "prompt_lookup":
        return {"prompt_lookup_num_tokens": config.prompt_lookup_tokens}
    return {
        "num_assistant_tokens": config.num_assistant_tokens,
        "num_assistant_tokens_schedule": "constant" if arm == "constant" else "heuristic",
        # 0 turns the confidence stop off; only the dynamic arm stops drafting on low confidence.
        "assistant_confidence_threshold": config.confidence_threshold if arm == "dynamic" else 0.0,
    }


def _generate_kwargs(arm: str, config: ProposalConfig, drafts: dict[str, Any]) -> dict[str, Any]:
    if arm == "target":
        return {}
    if arm == "prompt_lookup":
        return {"prompt_lookup_num_tokens": config.prompt_lookup_tokens}
    return {"assistant_model": drafts[arm]}


def _make_drafts(loaded: LoadedModel, config: ProposalConfig) -> dict[str, Any]:
    drafts = {}
    for arm in ("constant", "heuristic", "dynamic"):
        if arm in config.arms:
            draft = truncated_draft(loaded.model, config.draft_layers)
            for key, value in arm_settings(arm, config).items():
                setattr(draft.generation_config, key, value)
            drafts[arm] = draft
    return drafts


def generate_once(loaded: LoadedModel, counter: PassCounter, ids, mask, arm: str, config: ProposalConfig,
                  drafts: dict[str, Any], device: str) -> dict[str, Any]:
    """One greedy generate call: new token ids, latency, target passes."""
    torch = import_torch()
    tok = loaded.tokenizer
    draft = drafts.get(arm)
    if draft is not None:  # transformers writes the heuristic length and the ROC-fitted threshold back: reset per call
        for key, value in arm_settings(arm, config).items():
            setattr(draft.generation_config, key, value)
    before = counter.count
    synchronize(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = loaded.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=config.max_new_tokens,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            **_generate_kwargs(arm, config, drafts))
    synchronize(device)
    latency_ms = (time.perf_counter() - t0) * 1e3
    new = out[0, ids.shape[1]:].tolist()
    # Some transformers releases let prompt lookup return one token past max_new_tokens; the
    # comparison covers the requested tokens and the excess is recorded, not hidden.
    overshoot = max(0, len(new) - config.max_new_tokens)
    new = new[: config.max_new_tokens]
    after = ({k: getattr(draft.generation_config, k, None)
              for k in ("num_assistant_tokens", "assistant_confidence_threshold")} if draft is not None else None)
    return {"tokens": new, "latency_ms": latency_ms, "target_passes": counter.count - before,
            "tokens_past_max": overshoot, "draft_state_after": after,
            "stopped": bool(new) and tok.eos_token_id is not None and new[-1] == tok.eos_token_id}


def run(requested: ProposalConfig, ctx: RunContext) -> Outcome:
    from harness.cuda.proposal_report import build_outcome

    config = requested.sized_for(ctx.device)
    size = size_record(requested, config, ctx.device)
    print(f"proposal on {ctx.device}: {config.prompts} prompts x {config.max_new_tokens} tokens ({size['note']})",
          flush=True)
    torch = import_torch()
    loaded = load_causal_lm(config.model, device=ctx.device, dtype=config.dtype, seed=config.seed)
    drafts = _make_drafts(loaded, config)
    sklearn = _sklearn_version()
    arms = list(dict.fromkeys(("target", *config.arms)))
    prompts = [loaded.tokenizer(p, return_tensors="pt") for p in PROMPTS[: config.prompts]]
    counter = PassCounter(loaded.model)
    calls: list[dict[str, Any]] = []
    reference: dict[int, list[int]] = {}
    try:
        for round_idx in range(config.warmup + config.iters):
            timed = round_idx >= config.warmup
            for p_idx, enc in enumerate(prompts):
                ids, mask = enc.input_ids.to(ctx.device), enc.attention_mask.to(ctx.device)
                shift = round_idx % len(arms)
                order = arms[shift:] + arms[:shift]
                if p_idx not in reference:  # the target's output is the reference, so it runs first once
                    order = ["target", *[a for a in order if a != "target"]]
                for arm in order:
                    call = generate_once(loaded, counter, ids, mask, arm, config, drafts, ctx.device)
                    if arm == "target":
                        reference.setdefault(p_idx, call["tokens"])
                    record = {"arm": arm, "prompt": p_idx, "round": round_idx, "timed": timed,
                              "prompt_tokens": int(ids.shape[1]), "new_tokens": len(call["tokens"]),
                              "latency_ms": call["latency_ms"], "target_passes": call["target_passes"],
                              "stopped": call["stopped"], "tokens_past_max": call["tokens_past_max"],
                              "draft_state_after": call["draft_state_after"], "scikit_learn": sklearn,
                              "identical_to_target": call["tokens"] == reference[p_idx],
                              "first_divergence": _first_divergence(call["tokens"], reference[p_idx])}
                    ctx.samples.write(record)
                    calls.append(record)
    finally:
        counter.remove()
    return build_outcome(config, ctx, loaded, arms, calls, [int(e.input_ids.shape[1]) for e in prompts],
                         {a: arm_settings(a, config) for a in arms}, torch.__version__, size)


def _sklearn_version() -> str | None:
    """transformers re-fits the confidence threshold by ROC only when scikit-learn imports: it is recorded."""
    try:
        from importlib.metadata import version

        import sklearn  # noqa: F401

        return version("scikit-learn")
    except Exception:
        return None



def _first_divergence(tokens: list[int], reference: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(tokens, reference, strict=False)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


EXPERIMENT = Experiment(
    name="proposal", semantic_id="INF-PROPOSAL",
    help="assisted generation (truncated draft, prompt lookup; constant/heuristic/dynamic) vs target-only greedy",
    config=ProposalConfig, run=run,
)
