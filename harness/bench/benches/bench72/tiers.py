"""Named, absolute SLO tiers: the question "what capacity under these limits" is the same on every host.

The GPU tiers are MLPerf Inference's LLM server and interactive scenarios (Llama-2-70B: TTFT P99 2 s / TPOT P99
200 ms; interactive 450 ms / 40 ms). The CPU tiers are for the CPU default (SmolLM2-135M, 128-token prompts,
16 output tokens on 2 cores): on the slower host of docs/bench-72.md the fp32 default served TTFT P50 well under
a second at light load and the bf16 default 7.9 s for a 1056-token prompt, so ``cpu-server`` (3 s / 250 ms) is
met by an fp32 or native-bf16 server at light load and ``cpu-interactive`` (1 s / 100 ms) only by the faster
configurations. Relative SLOs (a multiple of a light-load P99) are the ``relative`` tier, on request only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tier:
    name: str
    ttft_p99_ms: float
    tpot_p99_ms: float
    source: str


TIERS = {t.name: t for t in (
    Tier("server", 2000.0, 200.0, "MLPerf Inference LLM server scenario (Llama-2-70B)"),
    Tier("interactive", 450.0, 40.0, "MLPerf Inference LLM interactive scenario (Llama-2-70B)"),
    Tier("cpu-server", 3000.0, 250.0, "infkit CPU default: a 2-core host meets it at light load"),
    Tier("cpu-interactive", 1000.0, 100.0, "infkit CPU default: the faster configurations only"),
)}
RELATIVE = "relative"
CHOICES = ("auto", *TIERS, RELATIVE)


def default_tier(backend: str) -> str:
    """``cpu-server`` on the CPU backend, ``server`` on a GPU backend."""
    return "cpu-server" if backend == "vllm-cpu" else "server"
