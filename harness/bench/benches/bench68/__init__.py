"""bench-68, INF-SPECULATIVE-BENCH: does speculative decoding pay, and where?

Arms, each a server start with its own ``--speculative-config`` (greedy, temperature 0); by default off and
ngram-k4 only, the others opt-in (each adds a start and its paired repeats):
  off          speculation off: the baseline
  ngram-kK     n-gram prompt lookup proposing K tokens (one arm per --ngram-tokens entry)
  draft-NL     a draft model: the served model's first N decoder layers (made reproducibly, hash recorded)
  self-draft   the served model as its own draft: every draft is accepted, so it isolates the
               verification and drafting overhead (the acceptance ceiling)
  eagle, eagle3, mtp   written for the GPU image (--eagle-model, --eagle3-model, --mtp)
Every speculative variant is optional: one the engine refuses here is capability_missing
with the engine's message. Workloads: ``copy`` (repeat the passage: the answer copies from
the prompt, where speculation should help) on every arm, and for the n-gram arm proposing the most
tokens the negative control ``natural`` (natural-text requests asking for new prose, served through the chat API
with end-of-sequence allowed, so repetition loops under ignore_eos cannot manufacture
acceptance; compared on per-token figures, TPOT and tokens/s, since answer lengths differ).

Protocol: the baseline server stays up throughout; each speculative variant is started in
turn next to it (two servers up at once), and on that pair the baseline and the variant
interleave per workload (order alternating per repeat), so every effect is paired against a
baseline measured alongside it; an invalid arm run is redone in its place (``--reruns``). Claims: E2E and TPOT
p50 per workload x variant (TPOT and tokens/s on the control); greedy output identity per request against the
baseline, judged in float32 (``identity.py``: on the measured arms where they serve float32, else on a short
float32 check after them); acceptance from vllm:spec_decode_*; the control's acceptance checked low
(``control.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.bench.benches.bench68.arms import (
    SpecArm,
    cited_proposal,
    paired_steps,
    read_speculative,
    spec_arms,
)
from harness.bench.benches.bench68.control import CONTROL, CONTROL_CLIENT, WORKLOADS
from harness.bench.benches.bench68.coresidence import ALONE_ARM, alone_steps
from harness.bench.benches.bench68.identity import FLOAT32, check_plan, measured_dtype
from harness.bench.lib.hostprofile import sized_shape
from harness.bench.metrics import (
    ACCEPTANCE_RATE,
    E2E_P50,
    ITL_P50,
    ITL_TOKEN_P50,
    MEAN_ACCEPTANCE_LENGTH,
    OUTPUT_TOKENS_PER_S,
    TPOT_P50,
    TTFT_P50,
)
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    Phase,
    Plan,
    Schedule,
    ServerVariant,
    WorkloadPlan,
)
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.models import PreparedModel
from harness.workload import Arrival, Common
from harness.workload.natural import PROMPTS

# The copy request at the reference size (hostprofile.SIZES scales it): short enough that 6 repeats fit the 720 s
# target on the reference host (hostprofile.DEFAULT_LOADS), long enough for several verification steps per request.
REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS = 192, 32
MIN_OUTPUT_TOKENS = 16  # several verification steps of the longest default n-gram proposal (4) per request


@dataclass(frozen=True)
class Lengths:
    """The copy workload's prompt and output tokens and the control's cap, and where they came from."""

    input_tokens: int
    output_tokens: int
    control_output_tokens: int
    why: str


NO_ARM = "no speculative arm to run: set --ngram-tokens, --draft-layers, --self-draft or a GPU arm"


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized so the primary claim (n-gram k=4 on copy) can decide in <= 12 minutes on 2 CPU cores once the
    serving env and model are cached: one speculative variant, 6 repeats (even, so the order is balanced; one left
    out still leaves 5 pairs), the reference host's request lengths at the reference size, shorter at a smaller
    --size (``request_lengths``). More variants are opt-in: each adds a start and 6 paired repeats."""

    # the base default (2), as bench-00 starts its servers: a start variance it measures is for this engine setting
    kv_cache_space_gib: int = knob(2, "CPU backends: KV-cache size in GiB per server (two are up at once)", min=1,
                                   group="protocol")
    repeats: int = knob(6, "repeats of every pair, the order alternating (< 5 valid pairs lower the evidence level to "
                        "single)", min=1)
    requests: int = knob(4, "copy requests per arm run (x --scale)", min=1)
    input_tokens: int | None = knob(None, f"prompt length in tokens (copy workload; default: "
                                    f"{REFERENCE_INPUT_TOKENS} at the reference size, in proportion where the "
                                    "output is sized shorter)", min=64)
    output_tokens: int | None = knob(None, f"generated tokens per request (copy workload; ignore_eos: exact; default: "
                                     f"{REFERENCE_OUTPUT_TOKENS} at the reference size, fewer at a smaller "
                                     "--size)", min=2)
    ngram_tokens: tuple[int, ...] = knob(
        (4,), "n-gram arms: tokens proposed per step, one arm each ('' for none)", min=1, max=16, empty=True
    )
    prompt_lookup_min: int = knob(2, "n-gram arms: shortest n-gram matched in the context", min=1)
    prompt_lookup_max: int = knob(4, "n-gram arms: longest n-gram matched in the context", min=1)
    draft_layers: int = knob(0, "draft-model arm: the served model's first N layers (0: no such arm; e.g. 10)",
                             min=0)
    draft_tokens: int = knob(3, "draft-model and self-draft arms: tokens drafted per step", min=1, max=16)
    self_draft: bool = knob(False, "run the self-draft arm (the acceptance ceiling; it fits the verification cost "
                            "the predictions use)")
    baseline_alone: bool = knob(True, "measure the baseline alone first: its co-residence shift beside each variant")
    eagle_model: str | None = knob(None, "EAGLE draft head directory: adds an eagle arm (GPU image)")
    eagle3_model: str | None = knob(None, "EAGLE-3 draft head directory: adds an eagle3 arm (GPU image)")
    mtp: bool = knob(False, "add an MTP arm (a model with multi-token-prediction layers; GPU image)")
    proposal_manifest: str | None = knob(
        None,
        "cuda-proposal manifest to cite (default: the newest INF-PROPOSAL "
        "run holding proposal.json under manifests/; 'none': cite nothing)",
        cites="INF-PROPOSAL",
        group="protocol",
    )
    identity_min_exact_share: float = knob(
        1.0, "greedy identity (judged in float32, bench68/identity.py): share of requests whose output must equal "
        "speculation off's exactly; 1 - it is the stated tolerance", min=0, max=1)
    mc_passes: int = knob(20_000, "Monte-Carlo verification passes of the prediction", min=100, group="protocol")
    control_requests: int = knob(
        6, f"negative control: natural-text requests per arm run (x --scale; at most {len(PROMPTS)})", min=1
    )
    control_output_tokens: int | None = knob(None, f"negative control: max_tokens cap (EOS allowed; default: "
                                             f"{REFERENCE_OUTPUT_TOKENS}, sized as the copy output)", min=2, max=64)
    control_max_acceptance: float = knob(
        0.5,
        "negative control: n-gram acceptance on the natural workload must stay at or below this "
        "(above it most drafted tokens are accepted: a copy or loop regime, not natural prose)",
        min=0,
        max=1,
    )
    control_max_copy_share: float = knob(
        0.5,
        "negative control: and at or below this share of the same arm's acceptance on the copy workload",
        min=0,
        max=1,
    )

    def check(self) -> None:
        if self.control_requests * self.scale > len(PROMPTS):
            raise InvalidInput(f"--control-requests x --scale = {self.control_requests * self.scale}: the natural "
                               f"workload has {len(PROMPTS)} distinct prompts")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise InvalidInput("--prompt-lookup-min must not exceed --prompt-lookup-max")
        # unset lengths are bounded by the reference host's, the longest the defaults can be
        input_tokens = self.input_tokens or REFERENCE_INPUT_TOKENS
        output_tokens = self.output_tokens or REFERENCE_OUTPUT_TOKENS
        if input_tokens + output_tokens > self.max_model_len:
            raise InvalidInput(f"input plus output tokens exceed --max-model-len {self.max_model_len}")
        if output_tokens + 32 > input_tokens:
            raise InvalidInput(
                "--input-tokens must exceed --output-tokens by 32 or more, so the copy workload's "
                "passage is longer than the answer"
            )
        for name in ("eagle_model", "eagle3_model"):
            path = getattr(self, name)
            if path and not Path(path).is_dir():
                raise InvalidInput(f"--{name.replace('_', '-')} {path}: no such directory")
        if not (self.ngram_tokens or self.draft_layers or self.self_draft or self.eagle_model or self.eagle3_model
                or self.mtp):
            raise InvalidInput(NO_ARM)
        layers = declared_layers(self.model)  # a catalog model's, known before it is prepared
        if self.draft_layers and layers is not None and not self.draft_layers < layers:
            raise InvalidInput(f"--draft-layers {self.draft_layers}: draft layers must be between 1 and {layers - 1} "
                               f"({self.model} has {layers})")


def declared_layers(model: str) -> int | None:
    """The decoder layers of a catalog model by its published shape (``harness.models.shapes``), None for any other
    name (a checkpoint directory's own config is read when the plan is built, before any setup too)."""
    from harness.models.resolve import is_catalog
    from harness.models.shapes import get_model

    if not is_catalog(model):
        return None
    try:
        return get_model(model).num_layers
    except (InvalidInput, KeyError, ValueError):
        return None


COLUMNS = (TTFT_P50, TPOT_P50, ITL_P50, ITL_TOKEN_P50, E2E_P50, OUTPUT_TOKENS_PER_S, ACCEPTANCE_RATE,
           MEAN_ACCEPTANCE_LENGTH)
NOTES = (
    "greedy (temperature 0); copy with ignore_eos (every request generates exactly --output-tokens); the natural "
    "control through the chat API with EOS allowed (--control-output-tokens is a cap)",
    "two servers are up at once (baseline + one variant), each with --kv-cache-space-gib",
    "warm-up requests use their own workload and are not measured",
)


def arm_pairs(sa: SpecArm) -> tuple[list[tuple[Arm, Arm]], list[Claim]]:
    """(baseline, variant) arms per workload and their claims: E2E and TPOT p50, per-token figures on the control
    (its answers end at EOS, so lengths differ by prompt: TPOT and tokens/s, not E2E)."""
    pairs, claims = [], []
    for w in sa.workloads:
        client = CONTROL_CLIENT if w == CONTROL else {}
        base, spec = Arm(f"{w}/off@{sa.name}", w, "off", client), Arm(f"{w}/{sa.name}", w, sa.name, client)
        pairs.append((base, spec))
        metrics = (TPOT_P50, OUTPUT_TOKENS_PER_S) if w == CONTROL else (E2E_P50, TPOT_P50)
        claims += [Claim(m, base.label, spec.label, name=f"{spec.label} {m.title.split(' ')[0]}") for m in metrics]
    return pairs, claims


def request_lengths(cfg: Config) -> Lengths:
    """The copy request's lengths and the control's cap: as set, else the reference host's, all three scaled by the
    named size's factor (``sized_shape``), so the prompt keeps its share of each request (TTFT about a fifth of E2E
    at every size)."""
    if cfg.output_tokens is not None:
        prompt, output = REFERENCE_INPUT_TOKENS, cfg.output_tokens
        why = f"{output} output tokens, set by --output-tokens"
    else:
        prompt, output, sized = sized_shape((REFERENCE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS), cfg.size,
                                            floor=MIN_OUTPUT_TOKENS, step=4)
        why = f"{output} output tokens: {sized}"
    input_tokens = cfg.input_tokens or max(output + 32, prompt)
    control = cfg.control_output_tokens or (output if cfg.output_tokens is None else REFERENCE_OUTPUT_TOKENS)
    return Lengths(input_tokens, output, control,
                   f"{why}; prompt {input_tokens}{', set by --input-tokens' if cfg.input_tokens else ''}, control cap "
                   f"{control}{', set by --control-output-tokens' if cfg.control_output_tokens else ''}")


def plan(cfg: Config, model: PreparedModel) -> Plan:
    citation = cited_proposal(cfg.proposal_manifest, Path.cwd())
    arms: list[SpecArm] = spec_arms(cfg, model)
    if not arms:
        raise InvalidInput(NO_ARM)
    lengths = request_lengths(cfg)
    closed = Arrival("closed", concurrency=1)
    common = Common(arrival=closed, seed=cfg.seed, requests=cfg.requests * cfg.scale,
                    input_tokens=lengths.input_tokens, output_tokens=lengths.output_tokens)
    workloads = [WorkloadPlan(w, w, common) for w in WORKLOADS]
    if any(sa.kind == "ngram" for sa in arms):
        control = Common(arrival=closed, seed=cfg.seed, requests=cfg.control_requests * cfg.scale,
                         output_tokens=lengths.control_output_tokens)
        workloads.append(WorkloadPlan(CONTROL, CONTROL, control))
    common_settings = {"kv_cache_space_gib": cfg.kv_cache_space_gib, **({"dtype": cfg.dtype} if cfg.dtype else {})}
    servers, bench_arms, phases, claims = [ServerVariant("off", common_settings)], [], [], []
    if cfg.baseline_alone:
        bench_arms.append(ALONE_ARM)
        phases.append(Phase("off", ("off",), alone_steps(cfg.repeats), planned_steps=cfg.repeats))
    for sa in arms:
        extra = ("--speculative-config", json.dumps(sa.config, sort_keys=True))
        servers.append(ServerVariant(sa.name, {**common_settings, "extra_args": extra}, optional=True, note=sa.note))
        pairs, pair_claims = arm_pairs(sa)
        bench_arms += [a for pair in pairs for a in pair]
        claims += pair_claims
        phases.append(Phase(f"off+{sa.name}", ("off", sa.name), paired_steps(pairs, cfg.repeats, sa.name),
                            planned_steps=2 * len(pairs) * cfg.repeats, keep=("off",), rerun=True))
    dtype = measured_dtype(cfg)
    if dtype != FLOAT32:  # greedy identity is judged in float32 (identity.py): a short check after the measured arms
        check = check_plan({"kv_cache_space_gib": cfg.kv_cache_space_gib}, [(sa.name, sa.config) for sa in arms],
                           WORKLOADS[0])
        servers += check[0]
        bench_arms += check[1]
        phases += check[2]
    schedule = Schedule(
        tuple(phases),
        ("the baseline server starts first and runs copy alone (its co-residence reference); " if cfg.baseline_alone
         else "") + "the baseline server stays up; each speculative variant is started in turn "
        "next to it and its arms interleave with a baseline arm on the same workload, order "
        "alternating per repeat" + ("" if dtype == FLOAT32 else f"; the measured arms serve {dtype}, so greedy "
                                    "identity is then checked in float32: speculation off and each variant served "
                                    "in float32 (eager) replay the copy workload once"),
    )
    return Plan(
        workloads=tuple(workloads),
        servers=tuple(servers),
        arms=tuple(bench_arms),
        schedule=schedule,
        claims=tuple(claims),
        read=read_speculative(cfg, arms, citation, dtype),
        run_label="speculative decoding vs off",
        columns=COLUMNS,
        notes=(f"request lengths: {lengths.why}", *NOTES),
    )


SPEC = BenchSpec(
    name="68",
    semantic_id="INF-SPECULATIVE-BENCH",
    question="does speculative decoding pay, and where?",
    config=Config,
    plan=plan,
    crosses_starts=True,
    outputs=("e2e_cdf.png",),
    next_steps={
        "adopt": "serve the adopted configuration for that traffic only; confirm on the GPU image "
        "(make bench-68 GPU=0), where drafts are cheap relative to the target",
        "reject": "keep speculation off on this platform: verification costs more than accepted drafts save here, "
        "or (the identical fp32 column) it changes the answers",
        "inconclusive": "read the acceptance columns first; a cross-start row needs a bench-00 run from this host "
        "(make bench-00) to decide; otherwise raise --repeats or SCALE to narrow the intervals; a row whose float32 "
        "outputs differ (identical fp32 column) is another computation, which repeats do not fix",
        "blocked": "read the failure (its stage and message, the server log tail under servers/) and rerun make "
        "bench-68",
        "aborted": "the run was interrupted: rerun make bench-68 for a decision",
    },
)
