"""bench-68, INF-SPECULATIVE-BENCH: does speculative decoding pay, and where?

Arms, each a server start with its own ``--speculative-config`` (greedy, temperature 0):
  off          speculation off: the baseline
  ngram-kK     n-gram prompt lookup proposing K tokens (one arm per --ngram-tokens entry)
  draft-NL     a draft model: the served model's first N decoder layers (made reproducibly, hash recorded)
  self-draft   the served model as its own draft: every draft is accepted, so it isolates the
               verification and drafting overhead (the acceptance ceiling)
  eagle, eagle3, mtp   written for the GPU image (--eagle-model, --eagle3-model, --mtp)
Every speculative variant is optional: one the engine refuses here is capability_missing
with the engine's message. Two workloads with identical token counts: ``copy`` (repeat
the passage: the answer copies from the prompt, where speculation should help) and
``random`` (independent prompts, where it should not).

Protocol: the baseline server stays up throughout; each speculative variant is started in
turn next to it (two servers up at once), and on that pair the baseline and the variant
interleave per workload (order alternating per repeat), so every effect is paired against a
baseline measured alongside it. Claims: E2E and TPOT p50 per workload x variant; greedy
output identity per request against the baseline; acceptance from vllm:spec_decode_*.
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

WORKLOADS = ("copy", "random")


@dataclass(frozen=True)
class Config(BenchConfig):
    """Defaults sized for <= 12 minutes on 2 CPU cores once the serving env and model are cached."""

    kv_cache_space_gib: int = knob(1, "CPU backends: KV-cache size in GiB per server (two are up at once)", min=1)
    requests: int = knob(3, "requests per workload in every arm run (x --scale)", min=1)
    input_tokens: int = knob(256, "prompt length in tokens (both workloads)", min=64)
    output_tokens: int = knob(48, "generated tokens per request (ignore_eos: exact)", min=2)
    ngram_tokens: tuple[int, ...] = knob(
        (2, 4), "n-gram arms: tokens proposed per step, one arm each ('' for none)", min=1, max=16, empty=True
    )
    prompt_lookup_min: int = knob(2, "n-gram arms: shortest n-gram matched in the context", min=1)
    prompt_lookup_max: int = knob(4, "n-gram arms: longest n-gram matched in the context", min=1)
    draft_layers: int = knob(10, "draft-model arm: the served model's first N layers (0: no such arm)", min=0)
    draft_tokens: int = knob(3, "draft-model and self-draft arms: tokens drafted per step", min=1, max=16)
    self_draft: bool = knob(True, "run the self-draft arm (acceptance ceiling)")
    eagle_model: str | None = knob(None, "EAGLE draft head directory: adds an eagle arm (GPU image)")
    eagle3_model: str | None = knob(None, "EAGLE-3 draft head directory: adds an eagle3 arm (GPU image)")
    mtp: bool = knob(False, "add an MTP arm (a model with multi-token-prediction layers; GPU image)")
    proposal_manifest: str | None = knob(
        None,
        "cuda-proposal manifest to cite (default: the newest INF-PROPOSAL "
        "run holding proposal.json under manifests/; 'none': cite nothing)",
    )
    mc_passes: int = knob(20_000, "Monte-Carlo verification passes of the prediction", min=100)
    control_max_acceptance: float = knob(
        0.5,
        "negative control: n-gram acceptance on the random workload must stay "
        "at or below this for it to count as a control",
        min=0,
        max=1,
    )

    def check(self) -> None:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise InvalidInput("--prompt-lookup-min must not exceed --prompt-lookup-max")
        if self.input_tokens + self.output_tokens > self.max_model_len:
            raise InvalidInput(f"input plus output tokens exceed --max-model-len {self.max_model_len}")
        if self.output_tokens + 32 > self.input_tokens:
            raise InvalidInput(
                "--input-tokens must exceed --output-tokens by 32 or more, so the copy workload's "
                "passage is longer than the answer"
            )
        for name in ("eagle_model", "eagle3_model"):
            path = getattr(self, name)
            if path and not Path(path).is_dir():
                raise InvalidInput(f"--{name.replace('_', '-')} {path}: no such directory")


COLUMNS = (TTFT_P50, TPOT_P50, ITL_P50, ITL_TOKEN_P50, E2E_P50, OUTPUT_TOKENS_PER_S, ACCEPTANCE_RATE,
           MEAN_ACCEPTANCE_LENGTH)
NOTES = (
    "greedy (temperature 0) with ignore_eos: every request generates exactly --output-tokens",
    "two servers are up at once (baseline + one variant), each with --kv-cache-space-gib",
    "warm-up requests use their own workload and are not measured",
)


def plan(cfg: Config, model: PreparedModel) -> Plan:
    citation = cited_proposal(cfg.proposal_manifest, Path.cwd())
    arms: list[SpecArm] = spec_arms(cfg, model)
    common = Common(
        arrival=Arrival("closed", concurrency=1),
        seed=cfg.seed,
        requests=cfg.requests * cfg.scale,
        input_tokens=cfg.input_tokens,
        output_tokens=cfg.output_tokens,
    )
    workloads = [WorkloadPlan(w, w, common) for w in WORKLOADS]
    common_settings = {"kv_cache_space_gib": cfg.kv_cache_space_gib, **({"dtype": cfg.dtype} if cfg.dtype else {})}
    base = ServerVariant("off", common_settings)
    servers, bench_arms, phases, claims = [base], [], [], []
    for sa in arms:
        servers.append(
            ServerVariant(
                sa.name,
                {**common_settings, "extra_args": ("--speculative-config", json.dumps(sa.config, sort_keys=True))},
                optional=True,
                note=sa.note,
            )
        )
        pairs = [(Arm(f"{w}/off@{sa.name}", w, "off"), Arm(f"{w}/{sa.name}", w, sa.name)) for w in WORKLOADS]
        bench_arms += [a for pair in pairs for a in pair]
        phases.append(
            Phase(
                f"off+{sa.name}",
                ("off", sa.name),
                paired_steps(pairs, cfg.repeats, sa.name),
                planned_steps=2 * len(pairs) * cfg.repeats,
                keep=("off",),
            )
        )
        claims += [
            Claim(m, b.label, s.label, name=f"{s.label} {m.title.split(' ')[0]}")
            for b, s in pairs
            for m in (E2E_P50, TPOT_P50)
        ]
    if not arms:
        raise InvalidInput("no speculative arm to run: set --ngram-tokens, --draft-layers, --self-draft or a GPU arm")
    schedule = Schedule(
        tuple(phases),
        "the baseline server stays up; each speculative variant is started in turn "
        "next to it and its arms interleave with a baseline arm on the same workload, order "
        "alternating per repeat",
    )
    return Plan(
        workloads=tuple(workloads),
        servers=tuple(servers),
        arms=tuple(bench_arms),
        schedule=schedule,
        claims=tuple(claims),
        read=read_speculative(cfg, arms, citation),
        run_label="speculative decoding vs off",
        columns=COLUMNS,
        notes=NOTES,
    )


SPEC = BenchSpec(
    name="68",
    semantic_id="INF-SPECULATIVE-BENCH",
    question="does speculative decoding pay, and where?",
    config=Config,
    plan=plan,
    outputs=("e2e_cdf.png",),
    next_steps={
        "adopt": "serve the adopted configuration for that traffic only; confirm on the GPU image "
        "(make bench-68 GPU=0), where drafts are cheap relative to the target",
        "reject": "keep speculation off on this platform: verification costs more than accepted drafts save here",
        "inconclusive": "raise --repeats or SCALE to narrow the intervals; read the acceptance columns first",
        "blocked": "read the failure (server log tail or greedy mismatch) and rerun make bench-68",
        "aborted": "the run was interrupted: rerun make bench-68 for a decision",
    },
)
