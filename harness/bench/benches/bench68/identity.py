"""bench-68's greedy identity, judged where it is defined: in float32, against speculation off as the fixed reference.

The engine's speculative path is lossless only up to arithmetic: a verification pass scores K + 1 positions in one
forward where plain decoding scores one, and in bfloat16 the other batch shape rounds differently and flips
near-tied argmaxes (an idle 2-core host served n-gram k=2 and k=4 in bf16 with 6 of 9 outputs equal to the
baseline's). float32 carries 16 more mantissa bits, so such flips there are rare enough that a difference means
another computation. The verdict is therefore read on float32 outputs whatever dtype the measured arms serve:

- measured arms served in float32: their own outputs, the baseline's per request index the reference;
- any other dtype: a short check after the measured phases: the baseline and each speculative variant served in
  float32 (``--enforce-eager``, so they start in seconds; one eager path on both sides), each replaying the copy
  workload once (``identity/off@<variant>`` then ``identity/<variant>``), the baseline's outputs the reference. The
  measured arms' own agreement is recorded beside it as a description, never judged.

Per variant the verdict passes when the share of requests whose text equals the reference's exactly is at least
``--identity-min-exact-share`` (``harness.bench.lib.greedy``, the rule bench-72's numerics gate states); its
complement is the stated tolerance. A variant that fails is another computation: its rows read "reject (outputs
differ)". A variant with no float32 outputs (its check refused or never reached) is unchecked: never adopted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.backends.host_dtype import choose_dtype
from harness.bench.benches.bench68.acceptance import Agreement, agreement, reference_outputs
from harness.bench.lib.greedy import ALIASES
from harness.bench.placement import resolve_placement
from harness.bench.records import ArmRun
from harness.bench.spec import Arm, History, Phase, ServerVariant, Step
from harness.rundir.fingerprint import host_isa

FLOAT32 = "float32"
CHECK = "identity"  # the float32 check's arm labels: identity/off@<variant>, identity/<variant>
BASE = "off-fp32"
RULE = ("greedy identity is judged in float32 against speculation off (temperature 0): on the measured arms where "
        "they serve float32, else on a float32 check replaying the copy workload on both; a variant passes when its "
        "exact-match share is >= {share:.0%} (tolerance {tol:.0%} of requests); a bf16 measured arm's agreement is "
        "described, never judged (near-tied argmaxes flip with the verification pass's batch shape)")


def measured_dtype(cfg: Any) -> str:
    """The dtype the measured arms serve: --dtype, else what the bench's resolution picks for this host (a plan
    may be built before that resolution writes it into the config)."""
    if cfg.dtype:
        return ALIASES.get(cfg.dtype, cfg.dtype)
    return choose_dtype(resolve_placement(cfg.gpu, cfg.backend, cfg.runtime).backend, host_isa()).dtype


def check_steps(base: Arm, spec: Arm, variant: str) -> Callable[[History], Iterator[Step]]:
    """The variant's float32 run, then the baseline's, once; nothing for a variant refused measured or in
    float32. Made while running and never redone: a late client does not change the text."""
    def steps(history: History) -> Iterator[Step]:
        for arm in (spec, base):
            if variant in history.refused or spec.server in history.refused:
                return
            yield 1, arm
    return steps


def check_plan(settings: dict[str, Any], variants: Sequence[tuple[str, dict[str, Any]]], workload: str
               ) -> tuple[list[ServerVariant], list[Arm], list[Phase]]:
    """The float32 check's servers, arms and phases: the baseline kept up, each variant started beside it in turn.
    ``variants``: (name, --speculative-config) of each measured speculative variant."""
    fp32 = {**settings, "dtype": FLOAT32, "enforce_eager": True}
    servers, arms, phases = [ServerVariant(BASE, fp32, note="the identity check's reference: speculation off")], [], []
    for name, config in variants:
        server = f"{name}-fp32"
        servers.append(ServerVariant(server, {**fp32, "extra_args": ("--speculative-config",
                                                                      json.dumps(config, sort_keys=True))},
                                     optional=True, note=f"{name} in float32, for the identity check"))
        base, spec = Arm(f"{CHECK}/off@{name}", workload, BASE), Arm(f"{CHECK}/{name}", workload, server)
        arms += [base, spec]
        phases.append(Phase(f"{CHECK} {name}", (BASE, server), check_steps(base, spec, name), planned_steps=2,
                            keep=(BASE,)))
    return servers, arms, phases


def identities(runs: Sequence[ArmRun], variants: Sequence[str], workloads: dict[str, Sequence[str]], dtype: str,
               min_exact_share: float) -> tuple[dict[tuple[str, str], Agreement], dict[tuple[str, str], Agreement]]:
    """Per (workload, variant) row: the identity verdict, and (where the measured arms were not float32) the
    measured arms' own agreement, a description. ``workloads``: each variant's measured workloads."""
    judged, described = {}, {}
    check_ref = reference_outputs(runs, [f"{CHECK}/off@{v}" for v in variants])
    checked = {name: agreement(runs, f"{CHECK}/{name}", check_ref, min_exact_share, CHECK_BASIS) for name in variants}
    for name in variants:
        for w in workloads[name]:
            ref = reference_outputs(runs, [f"{w}/off@{v}" for v in variants])
            if dtype == FLOAT32:
                judged[(w, name)] = agreement(runs, f"{w}/{name}", ref, min_exact_share, MEASURED_BASIS)
                continue
            got = checked[name]
            judged[(w, name)] = got if got.compared else Agreement(0, 0, None, min_exact_share, UNCHECKED)
            described[(w, name)] = agreement(runs, f"{w}/{name}", ref, 1.0,
                                             f"the measured arms, served in {dtype}: described, not judged")
    return judged, described


MEASURED_BASIS = "the measured arms, served in float32: their outputs against the baseline's"
CHECK_BASIS = ("the float32 check: the copy workload replayed on the variant and on speculation off, both served in "
               "float32 (eager), the latter's outputs the reference")
UNCHECKED = "not checked: no float32 outputs of this variant (its check was refused or not reached)"


def identity_record(dtype: str, min_exact_share: float) -> dict[str, Any]:
    """``details.identity``: where the verdict is read and against what, with its tolerance."""
    checked = dtype != FLOAT32
    return {"method": "float32 check" if checked else "measured arms (float32)", "dtype": FLOAT32,
            "measured_dtype": dtype, "reference": "speculation off, served in float32, temperature 0",
            "min_exact_share": min_exact_share, "tolerance": round(1 - min_exact_share, 6),
            "arms": f"{CHECK}/off@<variant>, {CHECK}/<variant>" if checked else "<workload>/off@<variant>, "
                                                                              "<workload>/<variant>",
            "rule": RULE.format(share=min_exact_share, tol=1 - min_exact_share)}
