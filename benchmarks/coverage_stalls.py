"""A simulated client stall as the client records it, judged per request by the kit's own rule.

The stalled arm run's requests run one after another (ready, first token, end); a stall of the client's loop delays
three consecutive requests' first tokens by ``STALL_MS`` and is kept with its start and end, as the loop-lag monitor
keeps it. ``harness.serving.stalls.stall_validity`` then judges the run as a serving result would: the three requests
are left out of the TTFT figures, and the run stays valid (3 of 40 requests is under the share that would void a
figure; its rates are judged by the loop-lag P99, which is not simulated). ``coverage_designs``' dropout row reads
such runs with ``harness.bench.exclusion`` through ``claims.claim_effect``: kept for its TTFT claim, not redone.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.bench.records import ArmRun
from harness.client import RequestRecord
from harness.contract import Conclusion, Correctness, Environment, Identity, Performance, Result, WorkloadInfo
from harness.serving.stalls import Stall, stall_validity

STALL_MS = 200.0  # what the stall adds to each held request's TTFT
STALLED = 3  # consecutive requests a stall overlaps
DECODE_S = 0.1
LOOP_LIMIT_MS = 20.0  # the loop-lag floor: the stall (hundreds of ms) is past it


# What a simulated arm run's result holds beside its validity and details: nothing the claims read (they read the
# records), in the typed groups a measured arm run's result is read into.
SIMULATED = Result(
    kind="serving", identity=Identity(semantic_id="SIM", workload_id="sha256:" + "0" * 64, run_label="sim",
                                      run_id="sim"),
    workload=WorkloadInfo(request_count=0, input_tokens={}, output_tokens={}, arrival={}, concurrency=None, seed=0),
    environment=Environment(profile_id="SIM", backend={"name": "simulated", "version": "0"}),
    performance=Performance(), correctness=Correctness(output_count=0, termination_counts={}),
    conclusion=Conclusion(evidence_level="single", decision="inconclusive", next_step=""))


def simulated_result(invalid_reasons: list[str], details: dict[str, Any] | None = None) -> Result:
    """A simulated arm run's result: valid unless it has reasons, with these details."""
    conclusion = replace(SIMULATED.conclusion, valid=not invalid_reasons, invalid_reasons=list(invalid_reasons))
    return replace(SIMULATED, conclusion=conclusion, details=details)


def sequential(ttft_ms: np.ndarray) -> tuple[RequestRecord, ...]:
    """One request after another from t = 0, each ``DECODE_S`` of decode after its first token."""
    out, t = [], 0.0
    for i, v in enumerate(ttft_ms):
        first = t + float(v) / 1e3
        out.append(RequestRecord(index=i, status="length", scheduled_s=t, sent_s=t, first_token_s=first,
                                 end_s=first + DECODE_S))
        t = first + DECODE_S
    return tuple(out)


def stalled_run(label: str, repeat: int, ttft_ms: np.ndarray, rng: np.random.Generator) -> ArmRun:
    """An arm run whose client stalled over ``STALLED`` consecutive requests' time to the first token, with the
    stall record and conclusion a serving result would carry."""
    at = int(rng.integers(0, max(1, ttft_ms.size - STALLED)))
    values = ttft_ms.copy()
    values[at:at + STALLED] += STALL_MS
    records = sequential(values)
    stall = Stall(0, records[at].sent_s + 1e-3, records[at + STALLED - 1].first_token_s)  # it held their first tokens
    judged = stall_validity(records, [stall], stall_ms=LOOP_LIMIT_MS, late_ms=None)
    return ArmRun(label, repeat, Path(f"sim/{label}/r{repeat}"),
                  simulated_result(judged["reasons"], details={"client": {"stalls": judged}}), records)
