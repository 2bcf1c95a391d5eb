"""bench-72's capacity table and bench-81's scaling table show energy per output token, average power and cost per
million output tokens (from each arm result's performance.energy) beside capacity and throughput."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.benches.bench72.capacity import Searched, verdict
from harness.bench.benches.bench72.decision import CAPACITY_HEADERS, capacity_rows
from harness.bench.benches.bench72.slo import SLO
from harness.bench.benches.bench81.scaling import SCALING_HEADERS, layout_scaling, scaling_table
from harness.bench.lib.search import Capacity
from harness.bench.records import ArmRun
from harness.client.records import RequestRecord
from tests.typed_results import arm_result

ENERGY = {"energy_j": 600.0, "avg_power_w": 300.0, "energy_per_output_token_j": 0.25,
          "cost_per_million_output_tokens_usd": 1.5}


def arm(label: str, repeat: int, energy: dict | None, tok_s: float = 100.0) -> ArmRun:
    recs = tuple(RequestRecord(index=i, status="length", scheduled_s=1.0, sent_s=1.0, first_token_s=1.05,
                               end_s=1.09, chunk_s=(1.05, 1.07, 1.09), output_tokens_requested=3, completion_tokens=3)
                 for i in range(20))
    result = {"performance": {"throughput": {"output_tokens_per_s": tok_s, "request_rate_rps": 2.0},
                              "energy": energy, "device_memory": {"peak_minus_idle_bytes": 3 * 2**30}},
              "conclusion": {"valid": True, "invalid_reasons": [], "failure": None}, "details": {"client": {}}}
    return ArmRun(label=label, repeat=repeat, result_path=Path("x"), result=arm_result(result), records=recs)


def test_bench72_capacity_table_shows_energy_and_cost_at_capacity():
    slo = SLO(ttft_p99_ms=150.0, tpot_p99_ms=30.0, error_rate=0.05, basis="")
    probe = verdict(arm("c/1", 1, ENERGY), slo, 2.0)
    assert probe.passed and probe.detail["energy_per_output_token_j"] == 0.25
    assert probe.detail["device_memory_gib"] == 3.0
    cap = Capacity(capacity_rps=2.0, upper_rps=None, status="held", probes=1, confirmed=True, rates={})
    (row,) = capacity_rows([Searched("bf16", (probe,), cap, (), None)], {})
    shown = dict(zip(CAPACITY_HEADERS, row, strict=True))
    assert (shown["GPU mem GiB"], shown["J/out tok"], shown["avg W"], shown["$/M out tok"]) == ("3.00", "0.25",
                                                                                               "300", "1.5")
    cpu = verdict(arm("c/1", 1, None), slo, 2.0)
    (row,) = capacity_rows([Searched("cpu", (cpu,), cap, (), None)], {})
    assert dict(zip(CAPACITY_HEADERS, row, strict=True))["J/out tok"] == "-"  # not measured: a dash, never 0


def test_bench81_scaling_table_shows_the_median_energy_of_each_layout():
    runs = [arm("single", r, {**ENERGY, "energy_per_output_token_j": j}) for r, j in ((1, 0.2), (2, 0.3), (3, 0.9))]
    row = layout_scaling(runs, "single", 1, "single")
    assert row.energy["energy_per_output_token_j"] == pytest.approx(0.3)
    shown = dict(zip(SCALING_HEADERS, scaling_table([row])[0], strict=True))
    assert (shown["J/out tok"], shown["avg W"], shown["$/M out tok"]) == ("0.3", "300", "1.5")
